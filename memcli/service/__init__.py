"""The service layer: `memcli serve` (daemon), its HTTP API and MCP server, over the library."""
