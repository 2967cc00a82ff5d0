"""The service layer: `memcli serve`, one warm process per database, and its clients.

- `paths`   where a daemon's sockets, lock and pidfile live (standard library only)
- `client`  the CLI's client: forwards a command line and fds 0-2 to a running daemon
            (standard library only: it runs before anything heavy is imported)
- `runctx`  per-request environment, stdio and working folder inside the daemon
- `server`  the daemon's CLI socket: runs forwarded commands through the Typer app
- `daemon`  `memcli serve`'s process: lock/pidfile, model warm-up, signals, idle exit, the HTTP
            server (uvicorn on a unix socket, and TCP with `--port`), shutdown
- `http`, `auth`, `api`   the HTTP API and its tokens (`mcp`: the MCP server)
"""
