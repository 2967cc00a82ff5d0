"""What each operation does, over the domain, shared by the CLI, the HTTP service and the MCP
tools: the request models (requests.py: the shared scope and query, acb, ingest, history and
purge; ledger_ops.py; lifecycle_requests.py; curation.py), the `Memory` facade (memory.py) and
the operation bodies (retrieve.py, bundle.py, record.py, erase.py, ledger_ops.py,
lifecycle_ops.py). Nothing in this package prints, reads stdin or imports Typer."""
