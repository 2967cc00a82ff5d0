"""`memcli serve` and what it speaks: the daemon and forwarding, HTTP, MCP, OpenAPI."""
