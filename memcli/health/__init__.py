"""Health of a memory file: the checks of `memcli doctor`."""
