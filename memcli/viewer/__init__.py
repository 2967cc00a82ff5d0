"""The web pages of `memcli serve` under /ui: server-rendered HTML (Jinja2) over the operations
layer, the same calls the CLI, the HTTP API and MCP make, with the caller's scope of the API's
rules (memcli.operations.binding). Pages read without JavaScript; every asset ships in the wheel
(templates/, static/), nothing is fetched from elsewhere.

memcli.viewer.access decides who is calling (the API's token rules, a browser's login cookie)
and guards every form post (CSRF token, Origin); memcli.viewer.html renders a page with the
caller's scope; memcli.viewer.mount holds the routes, each one request calling one operation.
"""
