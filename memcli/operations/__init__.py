"""What each operation does, over the domain: the request models (requests.py), the `Memory`
facade (memory.py) and one payload function per operation (retrieve.py, bundle.py, record.py,
erase.py), shared by the CLI, the HTTP service and the MCP tools. Nothing in this package
prints, reads stdin or imports Typer."""
