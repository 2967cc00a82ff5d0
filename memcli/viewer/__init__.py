"""The web pages of `memcli serve` under /ui: server-rendered HTML (Jinja2) over the operations
layer, the same calls the CLI, the HTTP API and MCP make, with the caller's scope of the API's
rules (memcli.operations.binding). Pages read without JavaScript; every asset ships in the wheel
(templates/, static/), nothing is fetched from elsewhere.

memcli.viewer.access decides who is calling (the API's token rules, a browser's login cookie)
and guards every form post (CSRF token, Origin); memcli.viewer.html renders a page with the
caller's scope; memcli.viewer.site holds what every route shares and the login routes;
memcli.viewer.mount builds the routes for `memcli serve`'s app.

A page is a module of pages/ with a `register(site)`: its data is a function
`op(ctx, scope, params)` run by `site.run` (as the service runs an API operation: the caller's
bound scope, whose rules are memcli.operations.binding), rendered by `site.render(request,
template, scope, ...)`; `site.get(path, handler)` adds a page, `site.post(path, handler)` an
action (CSRF and Origin checked before it runs), which answers `see_other(...)`.
"""
