"""Code the tests share, and the benchmarks too (`from tests.support.pg import running_server`).

A package beside the tests, imported by its dotted name: pytest puts the repository root on the
path (tests/ is a package), a bench run as `python -m bench.x` from the root has it there too,
and the editable install (`pip install -e .`) adds it for any working folder. Nothing here edits
`sys.path`.

- backend: the backend matrix (SQLite and PostgreSQL) and readers of a database of either kind
- cli: the real CLI in-process (`CliRunner`, its command built once) and as a child process
- records: conversation records, NDJSON, a call recorder
- daemon, http_api, mcp, sockets, net: `memcli serve`, its HTTP API, MCP, unix sockets, ports
- pg, pg_db, pg_legs, pg_writers: the real PostgreSQL server, its databases, legs and writers
- llmstub: the scripted OpenAI-compatible server on 127.0.0.1
- fuzz, lifecycle, portable, trust: the suites of those names
"""
