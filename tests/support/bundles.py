"""A bundle built by the library for a JSON request, validated as the CLI and the service
validate it (memcli.acb.build.build_acb takes the validated request model)."""

from __future__ import annotations

from typing import Any

from memcli.acb import build as acb
from memcli.operations.requests import AcbRequest, parse_acb_request


def build_acb(memory: Any, request: dict[str, Any] | AcbRequest, **options: Any) -> dict[str, Any]:
    """`acb.build_acb` for `request` (a JSON object, or the model itself)."""
    if not isinstance(request, AcbRequest):
        request = parse_acb_request(request)
    return acb.build_acb(memory, request, **options)
