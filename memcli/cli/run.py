"""The bodies of `memcli query` and `memcli acb build`, free of Typer.

The Typer commands (and the HTTP/MCP service, through the library) call the functions here
with parsed values: choices arrive as plain strings (or Typer's str enums, which compare
equal), `db` as a Path or None.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from memcli.cli.common import open_memory
from memcli.cli.output import Format, emit, errors, read_stdin, resolve_format, warn

LEGS = ("lexical", "sparse", "dense", "entity", "trigram")


def _check_flags(values: dict[str, Any]) -> None:
    """Every text flag must be valid UTF-8: argv bytes that are not arrive as lone surrogates,
    which SQLite and the tokenizers cannot take."""
    from memcli.core.inputs import check_text

    for name, value in values.items():
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str):
                check_text(item, f"--{name.replace('_', '-')}")


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
            row.append(f"{legs}\n{boosts}")
        table.add_row(*(Text(cell) for cell in row))
    Console().print(table)


# The `query` parameters a `memory.query` JSON request on stdin can also give (flags win).
REQUEST_FIELDS = (
    "agent", "category", "tenant", "user", "agent_id", "session", "app_id", "run", "actor",
    "role", "kind", "channel", "pinned", "importance_min", "importance_max", "updated_after",
    "updated_before", "top_k", "return_mode", "budget_tokens", "threshold", "as_of",
)


def _json_object(text: str, what: str) -> dict[str, Any]:
    """One JSON object parsed from `text`, or a one-line UsageError (exit 2)."""
    import json

    from memcli.core.inputs import check_value
    from memcli.errors import UsageError

    try:
        data = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as exc:
        raise UsageError(f"{what} is not JSON: {exc.msg} at line {exc.lineno}") from exc
    except RecursionError as exc:
        raise UsageError(f"{what} is nested too deeply") from exc
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        raise UsageError(f"{what} is not usable JSON: {exc}".splitlines()[0]) from exc
    if not isinstance(data, dict):
        raise UsageError(f"{what} must be one JSON object")
    return check_value(data, what)


def _stdin_query(values: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """`query -`: stdin starting with `{` is one `memory.query` request (a flag given
    on the command line wins over the same field); anything else is the query text."""
    from memcli.query_request import parse_query_request

    raw = read_stdin()
    if not raw.lstrip().startswith("{"):
        return raw, values
    request = parse_query_request(_json_object(raw, "the query request")).as_flags()
    merged = {name: values[name] if values[name] is not None else request[name]
              for name in REQUEST_FIELDS}
    return request["text"], merged


def query(text: str, *, session: str | None = None, user: str | None = None,
          tenant: str | None = None, all_tenants: bool = False, agent: str | None = None,
          agent_id: str | None = None, run: str | None = None, actor: str | None = None,
          role: str | None = None, app_id: str | None = None,
          category: list[str] | None = None, kind: list[str] | None = None,
          channel: list[str] | None = None, sensitivity: list[str] | None = None,
          pinned: bool | None = None, importance_min: float | None = None,
          importance_max: float | None = None, updated_after: str | None = None,
          updated_before: str | None = None, top_k: int | None = None,
          threshold: float | None = None, return_mode: str | None = None,
          budget_tokens: int | None = None, legs: str | None = None, no_widen: bool = False,
          explain: bool = False, as_of: str | None = None, db: str | None = None,
          fmt: str | None = None, as_json: bool = False) -> None:
    """`memcli query`: hybrid retrieval with filters applied in SQL."""
    with errors():
        _check_flags({"session": session, "user": user, "tenant": tenant, "agent": agent,
                      "agent_id": agent_id, "run": run, "actor": actor, "role": role,
                      "app": app_id, "category": category, "kind": kind, "channel": channel,
                      "sensitivity": sensitivity, "updated_after": updated_after,
                      "updated_before": updated_before, "legs": legs, "as_of": as_of})
        values: dict[str, Any] = {
            "agent": agent, "category": category, "tenant": tenant, "user": user,
            "agent_id": agent_id, "session": session, "app_id": app_id, "run": run,
            "actor": actor, "role": role, "kind": kind, "channel": channel, "pinned": pinned,
            "importance_min": importance_min, "importance_max": importance_max,
            "updated_after": updated_after, "updated_before": updated_before, "top_k": top_k,
            "return_mode": return_mode, "budget_tokens": budget_tokens, "threshold": threshold,
            "as_of": as_of,
        }
        if text == "-":
            text, values = _stdin_query(values)
        _query(text, values, all_tenants=all_tenants, sensitivity=sensitivity, legs=legs,
               no_widen=no_widen, explain=explain, db=db, fmt=fmt, as_json=as_json)


def _query(text: str, v: dict[str, Any], *, all_tenants: bool, sensitivity: list[str] | None,
           legs: str | None, no_widen: bool, explain: bool, db: str | None,
           fmt: str | None, as_json: bool) -> None:
    """The query itself, once the text and its parameters (`v`, REQUEST_FIELDS) are known."""
    from memcli.errors import UsageError
    from memcli.operations import check_query, hits_payload, parse_time, query_window, run_query

    text, note = check_query(text)
    if note:
        warn(note)
    wanted = {p.strip() for p in legs.split(",")} if legs else None
    if wanted and not wanted <= set(LEGS):
        raise UsageError(f"unknown leg in --legs: {legs}", "use " + ", ".join(LEGS))
    query_window(v)  # a bad time is a usage error before the database is opened
    parse_time(v, "as_of")
    return_mode = str(v["return_mode"] or "full")
    with open_memory(db, with_embedder=wanted is None or "dense" in wanted,
                     with_sparse=wanted is None or "sparse" in wanted,
                     preload=True, must_exist=True) as memory:
        if wanted is not None:
            memory.retrieval.leg_weights = {
                k: w for k, w in memory.retrieval.leg_weights.items() if k in wanted}
        # Named legs are a strict search: no recency fallback, `[]` when nothing matches.
        result = run_query(memory, text, v, all_tenants=all_tenants, sensitivity=sensitivity,
                           no_widen=no_widen, fallback=wanted is None)
    resolved = resolve_format(Format(fmt) if fmt is not None else None, as_json)
    if resolved is Format.text:
        payload = result.model_dump()
        if note and explain:
            payload["query"] = f"{payload['query'][:60]}... [{note}]"
        emit(payload, resolved, lambda p: _render_hits(p, explain))
    else:
        # The JSON contract (memcli.operations.hits_payload): hits, or the memory system spec's
        # bullets.
        emit(hits_payload(result, return_mode), resolved)


def parse_caps(values: list[str]) -> dict[str, int]:
    """`--cap SECTION=TOKENS` values as a dict."""
    from memcli.errors import UsageError

    caps: dict[str, int] = {}
    for value in values:
        name, _, number = value.partition("=")
        if not number.strip().isdigit():
            raise UsageError(f"bad --cap {value!r}", "write --cap SECTION=TOKENS")
        caps[name.strip()] = int(number)
    return caps


def read_request(source: str | None) -> dict[str, Any]:
    """The JSON request object from stdin (`-`) or a file, or {}."""
    from memcli.errors import UsageError

    if source is None:
        return {}
    try:
        text = read_stdin() if source == "-" else Path(source).read_bytes().decode(
            "utf-8", errors="surrogateescape")
    except OSError as exc:
        raise UsageError(f"cannot read {source}: {exc.strerror}") from exc
    return _json_object(text, "the acb request")


def acb_build(
    request: str | None = None, *, query: str | None = None, tenant: str | None = None,
    user: str | None = None, session: str | None = None, agent: str | None = None,
    channel: str | None = None, intent: str | None = None, max_tokens: int | None = None,
    cap: list[str] | None = None, category: list[str] | None = None,
    app_id: str | None = None, since: int | None = None, no_track: bool = False,
    handoff: list[str] | None = None, checkpoint: bool = False, as_of: str | None = None,
    db: str | None = None, fmt: str | None = None, as_json: bool = False,
) -> None:
    """`memcli acb build`: a context bundle for the next model call."""
    from memcli.config import load_settings
    from memcli.errors import UsageError
    from memcli.operations import acb_payload, prepare_acb

    with errors():
        _check_flags({"query": query, "tenant": tenant, "user": user, "session": session,
                      "agent": agent, "channel": channel, "intent": intent, "cap": cap,
                      "category": category, "app": app_id, "handoff": handoff, "as_of": as_of})
        data = read_request(request)
        flags = {
            "query_text": query,
            "tenant_id": tenant,
            "user_id": user,
            "session_id": session,
            "agent_id": agent,
            "channel": channel,
            "intent": intent,
            "max_tokens": max_tokens,
            "app_id": app_id,
            "since": since,
            "categories": category or None,
            "handoff": handoff or None,
            "as_of": as_of,
        }
        data.update({k: v for k, v in flags.items() if v is not None})
        if cap:
            caps = data.get("caps") or {}
            if not isinstance(caps, dict):
                raise UsageError("bad acb request: caps must be an object of SECTION: TOKENS")
            data["caps"] = {**caps, **parse_caps(cap)}
        if no_track:
            data["track"] = False
        if checkpoint:
            data["include_checkpoint"] = True
        req, note = prepare_acb(data)
        if note:
            warn(note)
        settings = load_settings(db)
        with open_memory(db, with_embedder=bool(req.query_text),
                         preload=bool(req.query_text), settings=settings,
                         must_exist=True) as memory:
            bundle = acb_payload(memory, req, note, settings=settings)
        chosen = "json" if as_json else (str(fmt) if fmt is not None else None)
        if chosen is None:
            chosen = "markdown" if sys.stdout.isatty() else "json"
        if chosen in ("markdown", "text"):
            from memcli.acb.render import render_markdown

            sys.stdout.write(render_markdown(bundle))
        else:
            emit(bundle, Format(chosen))
