"""The pages, one module each; `register` adds every page's routes to the site."""

from __future__ import annotations

from typing import TYPE_CHECKING

from memcli.viewer.pages import (
    bundle_page,
    dashboard,
    ledger_page,
    memory_page,
    search_page,
    timeline,
)

if TYPE_CHECKING:
    from memcli.viewer.site import Pages


def register(site: Pages) -> None:
    for page in (timeline, search_page, memory_page, bundle_page, ledger_page, dashboard):
        page.register(site)
