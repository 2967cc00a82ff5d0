"""`memcli query`: its options are the fields of the query request
(memcli.operations.requests.QueryRequest), its answer the operation's payload
(memcli.operations.retrieve)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from memcli.cli.common import open_memory
from memcli.cli.options import DbOpt, FormatOpt, JsonOpt, check_flags, request_options
from memcli.cli.output import Format, emit, errors, json_object, read_stdin, resolve_format, warn

if TYPE_CHECKING:
    from memcli.operations.requests import QueryRequest

def _render_hits(payload: dict, explain: bool) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    scope = payload["scope"]
    steps = (payload.get("path") or scope).split(">")
    if steps[-1] == "recent":  # nothing matched: the newest memories stand in
        steps.pop()
        scope = f"{scope}, no match: newest memories"
    if len(steps) > 1:  # a session query that widened: say so
        scope = f"{scope}, widened from {steps[0]}"
    rerank = payload.get("rerank")
    if explain and rerank:  # what the configured reranker did (docs/guides/reranking.md)
        scope += (f", reranked top {rerank['candidates']} by {rerank['model']} in "
                  f"{rerank['latency_ms']:.0f} ms" if rerank["reranked"]
                  else f", rerank skipped: {rerank['skipped']}")
    # Text, not markup: a query or a hit holding "[...]" (every bullet does) is shown as is.
    table = Table(title=Text(f"{payload['query']}  [scope: {scope}]"), show_lines=False)
    for col in ("#", "id", "score", "session", "text"):
        table.add_column(col, overflow="fold")
    if explain:
        table.add_column("legs / boosts", overflow="fold")
    for i, hit in enumerate(payload["hits"], start=1):
        row = [str(i), str(hit["id"]), f"{hit['score']:.3f}", hit["session_id"] or "",
               hit["text"]]
        if explain:
            legs = " ".join(f"{k}#{v['rank']}={v['score']:.3g}" for k, v in hit["scores"].items())
            boosts = " ".join(f"{k}={v:.3g}" for k, v in hit["boosts"].items())
            if hit.get("rerank_score") is not None:
                boosts = f"rerank_score={hit['rerank_score']:.3g} {boosts}"
            row.append(f"{legs}\n{boosts}")
        table.add_row(*(Text(cell) for cell in row))
    Console().print(table)


def _request(text: str, given: dict[str, Any]) -> QueryRequest:
    """The request: the text (`-`: stdin, which starting with `{` is one memory-spec
    `memory.query` JSON request) and the flags, a flag winning over the same field."""
    from memcli.operations.requests import parse_query_request

    data: dict[str, Any] = {"query": text}
    if text == "-":
        raw = read_stdin()
        if raw.lstrip().startswith("{"):
            sent = json_object(raw, "the query request")
            # Its filters lifted to the top level, where a flag then replaces them; its text
            # as sent (the request below cuts it, and says so).
            stdin = parse_query_request(sent)
            data = {**stdin.model_dump(exclude_unset=True, exclude={"filters"}),
                    "query": sent["query"]}
        else:
            data = {"query": raw}
    request = parse_query_request(data | given)
    if note := request.truncation():
        warn(note)
    return request


@request_options("memcli.operations.requests:QueryRequest", skip=("query", "filters"),
                 short={"top_k": "-k"}, legacy={"agent_id": "--agent"},
                 off={"pinned": "--unpinned"})
def query_cmd(
    text: Annotated[str, typer.Argument(
        help="What to look for; `-` reads stdin: a memory.query JSON request "
             "when it starts with `{`, else the query text.")],
    given: dict[str, Any],
    db: DbOpt = None,
    fmt: FormatOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Find memories: full-text, vector and entity search fused, then reranked."""
    with errors():
        check_flags(given)
        _query(_request(text, given), db=db, fmt=resolve_format(fmt, as_json))


def _query(request: QueryRequest, *, db: str | None, fmt: Format) -> None:
    """The query run on the database and printed (named legs: only their models load)."""
    from memcli.operations.retrieve import hits_payload, run_query, scale_note

    legs = request.legs
    with open_memory(db, with_embedder=legs is None or "dense" in legs,
                     with_sparse=legs is None or "sparse" in legs,
                     preload=True, must_exist=True) as memory:
        result = run_query(memory, request)
    scale = scale_note(request, result)
    if scale:
        warn(scale)
    if result.rerank is not None and result.rerank.skipped:
        warn(f"rerank skipped: {result.rerank.skipped} (the fused order stands)")
    if fmt is Format.text:
        payload = result.model_dump()
        note = request.truncation()
        if note and request.explain:
            payload["query"] = f"{payload['query'][:60]}... [{note}]"
        emit(payload, fmt, lambda p: _render_hits(p, request.explain))
    else:
        # The JSON contract (memcli.operations.retrieve.hits_payload): hits, or the bullets,
        # or with --explain the whole account.
        emit(hits_payload(result, request), fmt)


def register(app: typer.Typer) -> None:
    app.command("query")(query_cmd)
