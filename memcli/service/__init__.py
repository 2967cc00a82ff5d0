"""The service layer: `memcli serve`, one warm process per database, and its clients.

- `daemon/`   the daemon apart from HTTP: where it listens (`paths`), the CLI's client that
              forwards a command to it and starts one when none answers (`client`,
              `autostart`; standard library only), its main process (`main_process`), the CLI
              socket and the forked process of each command (`server`, `worker`), what it loads
              before forking (`warm`), the background indexer (`indexer`), and the process that
              serves HTTP (`http_process`)
- `http/`     the HTTP API: the FastAPI app (`fastapi_app`), its routes (`routes`) and what every
              route does around its operation (`api_route`), tokens (`auth`), the body limit
              (`limits`)
- `api`, `typed_ops`   the operations HTTP, MCP and the hooks share; `schemas` their answers
- `mcp_server`, `mcp_tools`   the MCP server (stdio, or over HTTP under /mcp) and its tools
- `holder`    what a long-lived server holds open for its database; `hooks` the agent hooks
"""
