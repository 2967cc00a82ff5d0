"""The `memcli` command: Typer app, one module per command group, one output/error helper."""
