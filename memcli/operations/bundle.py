"""`acb build`'s operation: the bundle `memcli acb build --json` prints and `POST
/api/v1/acb/build` answers, built by one function. Nothing here prints or imports Typer."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memcli.acb.build import build_acb, parse_request
from memcli.operations.retrieve import bounded

if TYPE_CHECKING:
    from memcli.acb.build import AcbRequest
    from memcli.config import Settings
    from memcli.operations.memory import Memory


def prepare_acb(data: dict[str, Any]) -> tuple[AcbRequest, str | None]:
    """The validated acb request with its query bounded, and the note if it was cut."""

    req = parse_request(data)
    note = None
    if req.query_text:
        req.query_text, note = bounded(req.query_text)
    return req, note


def acb_payload(memory: Memory, req: AcbRequest, note: str | None, *, settings: Settings,
                allowed: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The bundle `acb build --json` prints (`allowed`: the only categories it may hold)."""

    bundle = build_acb(memory, req, settings=settings.acb, context_dir=settings.context_dir,
                       allowed=allowed)
    if note and isinstance(bundle.get("provenance"), dict):
        bundle["provenance"]["query_truncated"] = note
    return bundle
