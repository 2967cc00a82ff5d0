"""`acb build`'s operation: the bundle `memcli acb build --json` prints and `POST
/api/v1/acb/build` answers, built by one function. Nothing here prints or imports Typer."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memcli.acb.build import build_acb

if TYPE_CHECKING:
    from memcli.config import Settings
    from memcli.operations.memory import Memory
    from memcli.operations.requests import AcbRequest


def acb_payload(memory: Memory, req: AcbRequest, *, settings: Settings,
                allowed: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The bundle `acb build --json` prints (`allowed`: the only categories it may hold); a
    query the request cut says so in its provenance."""
    bundle = build_acb(memory, req, settings=settings.acb, context_dir=settings.context_dir,
                       allowed=allowed)
    note = req.truncation()
    if note and isinstance(bundle.get("provenance"), dict):
        bundle["provenance"]["query_truncated"] = note
    return bundle
