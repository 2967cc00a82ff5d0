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

LEGS = ("lexical", "sparse", "dense", "entity", "trigram")


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
    # Text, not markup: a query or a hit holding "[...]" (every bullet does) is shown as is.
    table = Table(title=Text(f"{payload['query']}  [scope: {scope}]"), show_lines=False)
    if payload.get("no_relevant") and payload["hits"]:
        scope = f"{scope}, nothing relevant: the least bad hits"
    for col in ("#", "id", "relevance", "score", "session", "text"):
        table.add_column(col, overflow="fold")
    if explain:
        table.add_column("legs / boosts", overflow="fold")
    for i, hit in enumerate(payload["hits"], start=1):
        row = [str(i), str(hit["id"]), f"{hit['relevance']:.3f}", f"{hit['score']:.3f}",
               hit["session_id"] or "",
               hit["text"]]
        if explain:
            legs = " ".join(f"{k}#{v['rank']}={v['score']:.3g}" for k, v in hit["scores"].items())
            boosts = " ".join(f"{k}={v:.3g}" for k, v in hit["boosts"].items())
            row.append(f"{legs}\n{boosts}")
        table.add_row(*(Text(cell) for cell in row))
    Console().print(table)


def _request(text: str, given: dict[str, Any]) -> QueryRequest:
    """The request: the text (`-`: stdin, which starting with `{` is one memory-spec
    `memory.query` JSON request) and the flags, a flag winning over the same field."""
    from memcli.operations.requests import parse_query_request
    from memcli.operations.retrieve import check_query

    data: dict[str, Any] = {"query": text}
    if text == "-":
        raw = read_stdin()
        if raw.lstrip().startswith("{"):
            stdin = parse_query_request(json_object(raw, "the query request"))
            data = stdin.model_dump(exclude_unset=True, exclude={"filters"})
        else:
            data = {"query": raw}
    _, note = check_query(data["query"])  # "empty query", bad UTF-8: before the model's rules
    if note:
        warn(note)
    return parse_query_request(data | given)


@request_options("memcli.operations.requests:QueryRequest", skip=("query", "filters"),
                 short={"top_k": "-k"}, legacy={"agent_id": "--agent"},
                 off={"pinned": "--unpinned"})
def query_cmd(
    text: Annotated[str, typer.Argument(
        help="What to look for; `-` reads stdin: a memory.query JSON request "
             "when it starts with `{`, else the query text.")],
    given: dict[str, Any],
    all_tenants: Annotated[bool, typer.Option(
        "--all-tenants", help="Read every tenant (an operator's search; not with --tenant-id).")
    ] = False,
    sensitivity: Annotated[list[str] | None, typer.Option("--sensitivity")] = None,
    legs: Annotated[str | None, typer.Option(
        "--legs",
        help="Comma-separated legs to use (lexical,sparse,dense,entity,trigram).")] = None,
    no_widen: Annotated[bool, typer.Option(
        "--no-widen", help="Never widen a session query to the user.")] = False,
    explain: Annotated[bool, typer.Option(
        "--explain", help="Show each leg's rank and score and each boost.")] = False,
    db: DbOpt = None,
    fmt: FormatOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Find memories: full-text, vector and entity search fused, then reranked."""
    with errors():
        check_flags({**given, "sensitivity": sensitivity, "legs": legs})
        request = _request(text, given)
        wanted = {p.strip() for p in legs.split(",")} if legs else None
        if wanted and not wanted <= set(LEGS):
            from memcli.errors import UsageError

            raise UsageError(f"unknown leg in --legs: {legs}", "use " + ", ".join(LEGS))
        _query(request, wanted, all_tenants=all_tenants, sensitivity=sensitivity,
               no_widen=no_widen, explain=explain, db=db,
               fmt=resolve_format(fmt, as_json))


def _query(request: QueryRequest, wanted: set[str] | None, *, all_tenants: bool,
           sensitivity: list[str] | None, no_widen: bool, explain: bool, db: str | None,
           fmt: Format) -> None:
    """The query run on the database and printed."""
    from memcli.operations.retrieve import hits_payload, run_query, scale_note

    with open_memory(db, with_embedder=wanted is None or "dense" in wanted,
                     with_sparse=wanted is None or "sparse" in wanted,
                     preload=True, must_exist=True) as memory:
        if wanted is not None:
            memory.retrieval.leg_weights = {
                k: w for k, w in memory.retrieval.leg_weights.items() if k in wanted}
        # Named legs are a strict search: no recency fallback, `[]` when nothing matches.
        result, note = run_query(memory, request, all_tenants=all_tenants,
                                 sensitivity=sensitivity, no_widen=no_widen,
                                 fallback=wanted is None)
    scale = scale_note(request, result)
    if scale:
        warn(scale)
    if fmt is Format.text:
        payload = result.model_dump()
        if note and explain:
            payload["query"] = f"{payload['query'][:60]}... [{note}]"
        emit(payload, fmt, lambda p: _render_hits(p, explain))
    else:
        # The JSON contract (memcli.operations.retrieve.hits_payload): hits, or the bullets.
        emit(hits_payload(result, request.return_format), fmt)


def register(app: typer.Typer) -> None:
    app.command("query")(query_cmd)
