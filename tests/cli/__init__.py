"""The command line's contract: output formats, exit codes, one-line errors, flags, help."""
