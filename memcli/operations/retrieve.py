"""`memcli query`'s operation: the query run and turned into the JSON payload that `memcli
query --json`, `POST /api/v1/query` and the MCP `memory_query` tool answer with, built by one
function. The request model checked and bounded the text (memcli.operations.requests); the CLI
keeps only what is its own: flags, stdin, warnings on stderr, the text rendering. Nothing here
prints, reads stdin or imports Typer; nothing heavy loads at import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memcli.core.records import QueryResult
    from memcli.operations.memory import Memory
    from memcli.operations.requests import QueryRequest


def run_query(memory: Memory, request: QueryRequest) -> QueryResult:
    """The query of a validated request. The agent's category allowlist is enforced by
    `Memory.filters`; the recency fallback (memcli.retrieval.fallback) answers when no leg
    finds anything, unless the request names its legs (a strict search)."""
    return memory.ask(request, fallback=request.legs is None)


def scale_note(request: QueryRequest, result: QueryResult) -> str | None:
    """When an importance bound of exactly 1 found nothing, the note that it means the top of
    memcli's 0-1 scale (the memory system spec's `importance_min: 1` means its lowest)."""
    if result.hits or 1.0 not in (request.importance_min, request.importance_max):
        return None
    return ("nothing matched importance 1: importance is on memcli's 0-1 scale, where 1 is "
            "the highest (the memory system spec's 1-5 scale is not used; its 1 is 0.0)")


def hits_payload(result: QueryResult, request: QueryRequest) -> Any:
    """The JSON contract of a query: an array of hits (each explains itself, its scope
    included), or the memory system spec's bullets `{id, category, text}` plus the scope that
    answered; with `explain`, the whole account (scope, path, legs, the hits)."""
    if request.explain:
        return result.model_dump()
    if request.return_format == "bullets":
        return [hit.bullet() for hit in result.hits]
    return [hit.model_dump() for hit in result.hits]
