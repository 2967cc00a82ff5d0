"""The service layer: `memcli serve`, one warm process per database, and its clients.

- `paths`   where a daemon's sockets, lock and pidfile live (standard library only)
- `client`  the CLI's client: forwards a command line and fds 0-2 to a running daemon
            (standard library only: it runs before anything heavy is imported)
- `daemon`  `memcli serve`'s main process: lock/pidfile, model warm-up, signals, idle exit,
            shutdown; one select loop on one thread, so that it can fork
- `server`  the daemon's CLI socket: one forked process per forwarded command
- `worker`  that process: becomes the caller's (environment, folder, stdio), runs the command
            through the runner the CLI gave the daemon
- `web`     the daemon's HTTP process (uvicorn on a unix socket, and TCP with `--port`) and
            what it holds open for the database (`holder`)
- `http`, `auth`, `api`   the HTTP API and its tokens (`mcp`: the MCP server)
"""
