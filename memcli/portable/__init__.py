"""Portability: `memcli export` writes a scope of a memory as JSONL, `memcli import` loads it
into another database (format.py: the file; export.py; importer.py)."""
