"""`memcli serve` apart from its HTTP API: the daemon's processes and the CLI's client of it.

Importing this package imports nothing: `paths`, `client` and `autostart` run on the CLI's
start-up path with the standard library only (see memcli/service/__init__.py for the modules).
"""
