"""The pages' routes for `memcli serve`'s app: memcli.service.http.fastapi_app.build_app mounts
them under /ui behind the app's Host check (they are not part of /openapi.json)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.routing import BaseRoute

from memcli.viewer import pages
from memcli.viewer.access import Access
from memcli.viewer.site import Pages


def viewer_routes(service: Any, *, check: Callable[..., Any], allowed_hosts: tuple[str, ...],
                  token_required: bool, status_for: Callable[..., Any],
                  tcp_url: str | None = None) -> list[BaseRoute]:
    """The routes of every page, for `memcli serve`'s app."""
    site = Pages(service, Access(check=check, allowed_hosts=allowed_hosts,
                                 token_required=token_required),
                 status_for=status_for, tcp_url=tcp_url)
    pages.register(site)
    return site.build()
