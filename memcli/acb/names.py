"""The Agent Memory System PRD's field names on a finished bundle (its section 7.2 response).

A bundle answers with the document's names, which clients of `POST /api/v1/acb/build` and the
`memory.build_acb` tool are written against, and keeps memcli's earlier names beside them:
those are documented output of `memcli acb build --json`, and scripts read them. Added here,
once the bundle is packed and counted, so the CLI, HTTP and MCP all print one bundle:

| the document | memcli (kept) | where |
|---|---|---|
| `token_used_est` | `token_used` | the bundle |
| `token_est` | `tokens` | each section |
| `candidates` | `refs` | each omission |
| `scoring: {alpha, beta, gamma}` | `weights` (with fusion, legs, half-life) | provenance |

The counts are exact tiktoken counts (memcli.acb.pack), not estimates; the document's `_est`
names are kept for its clients.
"""

from __future__ import annotations

from typing import Any


def _beside(row: dict[str, Any], after: str, key: str, value: Any) -> dict[str, Any]:
    """`row` with `key` placed right after `after` (JSON readers see the pair together)."""
    out: dict[str, Any] = {}
    for k, v in row.items():
        if k != key:
            out[k] = v
        if k == after:
            out[key] = value
    if after not in row:
        out[key] = value
    return out


def add_document_names(bundle: dict[str, Any]) -> dict[str, Any]:
    """The bundle with the document's names added beside memcli's (same values)."""
    bundle = _beside(bundle, "token_used", "token_used_est", bundle["token_used"])
    bundle["sections"] = [_beside(s, "tokens", "token_est", s["tokens"])
                          for s in bundle["sections"]]
    bundle["omissions"] = [_beside(o, "refs", "candidates", list(o.get("refs", [])))
                           for o in bundle["omissions"]]
    provenance = bundle.get("provenance")
    if isinstance(provenance, dict):
        weights = provenance.get("weights") or {}
        scoring = {k: weights.get(k) for k in ("alpha", "beta", "gamma")}
        bundle["provenance"] = _beside(provenance, "weights", "scoring", scoring)
    return bundle
