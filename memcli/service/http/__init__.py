"""`memcli serve`'s HTTP API: the FastAPI app, its routes, tokens and body limit (see
memcli/service/__init__.py for the modules); the daemon's HTTP process (memcli.service.daemon)
serves it."""
