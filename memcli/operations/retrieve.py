"""`memcli query`'s operation: the query checked, run and turned into the JSON payload that
`memcli query --json`, `POST /api/v1/query` and the MCP `memory_query` tool answer with, built
by one function. The CLI keeps only what is its own: flags, stdin, warnings on stderr, the text
rendering. Nothing here prints, reads stdin or imports Typer; nothing heavy loads at import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memcli.core.inputs import check_text
from memcli.errors import UsageError
from memcli.retrieval.text import MAX_QUERY_CHARS, bound_query

if TYPE_CHECKING:
    from memcli.core.records import QueryResult
    from memcli.operations.memory import Memory
    from memcli.operations.requests import QueryRequest


def bounded(text: str) -> tuple[str, str | None]:
    """The query cut to what the legs use, and the note saying so (None when not cut)."""

    kept = bound_query(text)
    if kept == text:
        return text, None
    return kept, (f"query truncated to its first {MAX_QUERY_CHARS} of {len(text)} characters "
                  "(what the search legs can use)")


def check_query(text: str) -> tuple[str, str | None]:
    """The query text checked (valid UTF-8, not blank) and bounded, with the note if cut."""

    check_text(text, "the query")
    if not text.strip():
        raise UsageError("empty query")
    return bounded(text)


def run_query(memory: Memory, request: QueryRequest, *, all_tenants: bool = False,
              sensitivity: list[str] | None = None, no_widen: bool = False,
              fallback: bool = True) -> tuple[QueryResult, str | None]:
    """The query of a validated request, and the note when its text was cut. The agent's
    category allowlist is enforced by `Memory.filters`. `fallback`: the recency fallback
    when no leg finds anything (memcli.retrieval.fallback)."""
    text, note = check_query(request.query)
    result = memory.ask(request.model_copy(update={"query": text}), all_tenants=all_tenants,
                        sensitivities=sensitivity, widen=not no_widen, fallback=fallback)
    return result, note


def scale_note(request: QueryRequest, result: QueryResult) -> str | None:
    """When an importance bound of exactly 1 found nothing, the note that it means the top of
    memcli's 0-1 scale (the memory system spec's `importance_min: 1` means its lowest)."""
    if result.hits or 1.0 not in (request.importance_min, request.importance_max):
        return None
    return ("nothing matched importance 1: importance is on memcli's 0-1 scale, where 1 is "
            "the highest (the memory system spec's 1-5 scale is not used; its 1 is 0.0)")


def hits_payload(result: QueryResult, return_format: str) -> list[dict[str, Any]]:
    """The JSON contract of a query: an array of hits (each explains itself, its scope
    included), or the memory system spec's bullets `{id, category, text}` plus the scope that
    answered."""
    if return_format == "bullets":
        return [hit.bullet() for hit in result.hits]
    return [hit.model_dump() for hit in result.hits]
