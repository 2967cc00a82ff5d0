"""Lifecycle commands: consolidate, decay, reflect, insights, remember, confirm, pin, proposals.

Each command's options are its request model's fields (memcli.operations.lifecycle_requests)
and its body an operation of memcli.operations.lifecycle_ops; what is here is the terminal's
part: flags, the one-line notices on stderr, the report printed and the exit code.

The commands cron runs (see README "Scheduling (cron)"): each takes a per-command lock in the
database (a second run exits 75), records its run in `lifecycle_runs`, and prints its report
(or, with --dry-run, its plan) on stdout. Commands that use a model say so on stderr in one
line when none is configured, and run only their model-free parts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any

import typer

from memcli.cli.common import on_one, open_memory
from memcli.cli.options import (
    DbOpt,
    FormatOpt,
    Given,
    JsonOpt,
    MemoryIdArg,
    id_argument,
    request_options,
)
from memcli.cli.output import emit, errors, read_stdin, resolve_format, warn, warn_redacted
from memcli.core.inputs import check_text
from memcli.operations.lifecycle_requests import (
    ConsolidateRequest,
    DecayRequest,
    MemoryRequest,
    ProposalRequest,
    ProposalsRequest,
    ReflectRequest,
    RejectRequest,
    RememberRequest,
)

if TYPE_CHECKING:
    from memcli.config import Settings
    from memcli.derived.llm_usage import Model
    from memcli.operations.memory import Memory

ProposalIdArg = Annotated[int, id_argument("A proposal id.")]


def _settings(db: str | None) -> Settings:
    from memcli.config import load_settings

    return load_settings(db)


@contextmanager
def _model(
    memory: Memory, settings: Settings, command: str, *, disabled: bool = False, what: str = ""
) -> Iterator[Model | None]:
    from memcli.derived.llm_usage import NO_LLM, NO_LLM_HINT, make_model

    model = None if disabled else make_model(memory.db, settings.llm, command)
    if model is None:
        # One line, so a cron mail says plainly that no model ran.
        reason = "--no-llm given" if disabled else f"{NO_LLM} ({NO_LLM_HINT})"
        warn(f"{reason}: {command} {what}")
    try:
        yield model
    finally:
        if model is not None:
            model.close()


def _finish(
    report: dict[str, Any], fmt: Any, as_json: bool, text: Callable[[dict[str, Any]], None]
) -> None:
    """Print the report; problems go to stderr, and a model failure makes the exit code 1."""
    emit(report, resolve_format(fmt, as_json), text)
    for err in report.get("errors", []):
        where = err.get("session_id") or err.get("user_id") or ""
        warn(f"{where}: {err.get('task', 'llm')}: {err['reason']}".lstrip(": "))
    for session in report.get("sessions", []):
        for item in session.get("dropped", []):  # the rest of the session was written
            warn(f"{session['session_id']}: dropped {item['item']}: {item['reason']}")
    for app_report in report.get("compaction", []):
        for action in app_report.get("actions", []):
            if action.get("fallback_because") and action["fallback_because"] != "no LLM configured":
                warn(
                    f"app {app_report['app_id']}: compaction fell back to FIFO: "
                    f"{action['fallback_because']}"
                )
    stopped = report.get("stopped")
    if stopped:
        warn(f"stopped early: {stopped}")
    budget = stopped and "budget" in stopped
    if report.get("errors") and not budget:
        raise typer.Exit(1)


def _consolidate_text(r: dict[str, Any]) -> None:
    verb = "would consolidate" if r["dry_run"] else "consolidated"
    print(f"{verb} {len(r['sessions'])} session(s) [{r['method']}]")
    for s in r["sessions"]:
        if r["dry_run"]:
            print(
                f"  {s['session_id']}: +{len(s['add'])} merge {len(s['merge'])} "
                f"supersede {len(s['supersede'])} proposals {len(s['proposals'])}"
            )
        else:
            print(
                f"  {s['session_id']}: +{len(s['added'])} merged {len(s['merged'])} "
                f"superseded {len(s['superseded'])} proposals {len(s['proposals'])}"
            )
        if s.get("capped"):
            print(f"    {len(s['capped'])} write(s) over a cap: {s['capped'][0]['reason']}")
    for d in r.get("deferred", []):
        print(f"  {d['session_id']}: waits for tomorrow ({d['reason']})")
    for a in r["compaction"]:
        print(
            f"  app {a['app_id']}: {a['before']} -> {a.get('after', a['before'])} "
            f"(limit {a['limit']})"
        )


def _created_text(r: dict[str, Any]) -> None:
    for item in r["created"]:
        print(f"{item.get('id', '(dry run)')}: {item['text']}")
    for item in r["skipped"]:
        print(f"skipped {item['user_id']}: {item['reason']}")


@request_options(ConsolidateRequest)
def consolidate_cmd(
    *, given: Given, db: DbOpt = None, fmt: FormatOpt = None, as_json: JsonOpt = False,
) -> None:
    """Turn finished sessions into deduplicated facts and summaries (cron: nightly)."""
    from memcli.cli.progress_bar import progress_bar
    from memcli.operations.lifecycle_ops import consolidate

    with errors():
        req = given.request("consolidate request")
        settings = _settings(db)
        with (
            open_memory(db, settings=settings, exists=True) as memory,
            _model(memory, settings, "consolidate", disabled=req.no_llm,
                   what="writes extractive summaries, deduplicates and links; no facts") as model,
            progress_bar() as progress,
        ):
            report = consolidate(memory, settings, req, model, progress)
        _finish(report, fmt, as_json, _consolidate_text)


def _decay_text(r: dict[str, Any]) -> None:
    print(f"{'would decay' if r['dry_run'] else 'decayed'} {r['decayed']}; soft-deleted "
          f"{r['soft_deleted']['decay']} (confidence) + {r['soft_deleted']['ttl']} (TTL);"
          f" purged {r['purged']}")


@request_options(DecayRequest)
def decay_cmd(
    *, given: Given, db: DbOpt = None, fmt: FormatOpt = None, as_json: JsonOpt = False,
) -> None:
    """Ebbinghaus decay and the TTL rule; pinned and protected memories never change."""
    from memcli.operations.lifecycle_ops import decay

    with errors():
        req = given.request("decay request")
        settings = _settings(db)
        with open_memory(db, with_embedder=False, settings=settings, exists=True) as memory:
            report = decay(memory, settings, req)
        _finish(report, fmt, as_json, _decay_text)


def _reflection(name: str, given: Given, db: str | None, fmt: Any,
                as_json: bool) -> None:
    """`reflect` and `insights`: the same per-user model job, run under a lock."""
    from memcli.operations.lifecycle_ops import reflection

    with errors():
        req = given.request(f"{name} request")
        settings = _settings(db)
        with (
            open_memory(db, settings=settings, exists=True) as memory,
            _model(memory, settings, name, what="needs a model; skipped") as model,
        ):
            report = reflection(name, memory, settings, req, model)
        _finish(report, fmt, as_json, _created_text)


@request_options(ReflectRequest)
def reflect_cmd(
    *, given: Given, db: DbOpt = None, fmt: FormatOpt = None, as_json: JsonOpt = False,
) -> None:
    """Weekly reflection per user over the last 7 days of facts (cron: weekly)."""
    _reflection("reflect", given, db, fmt, as_json)


@request_options(ReflectRequest)
def insights_cmd(
    *, given: Given, db: DbOpt = None, fmt: FormatOpt = None, as_json: JsonOpt = False,
) -> None:
    """1-3 relationship and preference insights per active user (at most once a day)."""
    _reflection("insights", given, db, fmt, as_json)


@request_options(RememberRequest, legacy={"steps": "--step", "pinned": "--pin"})
def remember_cmd(
    text: Annotated[str | None, typer.Argument(
        help="The fact (or steps); `-` reads stdin.", show_default=False)] = None,
    *, given: Given, db: DbOpt = None, fmt: FormatOpt = None, as_json: JsonOpt = False,
) -> None:
    """Store a fact or a procedure on explicit request (near-duplicates are merged)."""
    from memcli.operations.lifecycle_ops import remember

    with errors():
        if text == "-":
            text = check_text(read_stdin(), "the text on stdin")
        req = given.request("remember request", text=text)
        settings = _settings(db)
        with open_memory(db, settings=settings) as memory:
            out = remember(memory, settings.lifecycle, req)
        warn_redacted(out)
        emit(out, resolve_format(fmt, as_json),
             lambda p: print(f"{p['status']}: {p.get('id', p.get('proposal_id'))}"))


@request_options(MemoryRequest)
def confirm_cmd(
    memory_id: MemoryIdArg, *, given: Given,
    db: DbOpt = None, fmt: FormatOpt = None, as_json: JsonOpt = False,
) -> None:
    """Protect a memory: confidence 1, decay_rate 0 (decay never touches it again)."""
    from memcli.lifecycle.remember import confirm

    on_one(given, "confirm request",
           lambda memory, req: confirm(memory, req.memory_id, owner=memory.owner(req.tenant_id)),
           lambda p: print(f"protected {p['id']}"), db, fmt, as_json, memory_id=memory_id)


def _set_pin(flag: bool, memory_id: int, given: Given, db: str | None, fmt: Any,
             as_json: bool) -> None:
    from memcli.lifecycle.remember import set_pin

    on_one(given, "pin request",
           lambda memory, req: set_pin(memory, req.memory_id, flag,
                                       owner=memory.owner(req.tenant_id)),
           lambda p: print(f"{'pinned' if p['pinned'] else 'unpinned'} {p['id']}"),
           db, fmt, as_json, memory_id=memory_id)


@request_options(MemoryRequest)
def pin_cmd(
    memory_id: MemoryIdArg, *, given: Given,
    db: DbOpt = None, fmt: FormatOpt = None, as_json: JsonOpt = False,
) -> None:
    """Pin a memory: decay, TTL and app compaction leave it alone."""
    _set_pin(True, memory_id, given, db, fmt, as_json)


@request_options(MemoryRequest)
def unpin_cmd(
    memory_id: MemoryIdArg, *, given: Given,
    db: DbOpt = None, fmt: FormatOpt = None, as_json: JsonOpt = False,
) -> None:
    """Unpin a memory (decay and TTL apply again)."""
    _set_pin(False, memory_id, given, db, fmt, as_json)


def _proposal_text(rows: list[dict[str, Any]]) -> None:
    for r in rows:
        print(f"{r['id']}  {r['status']:<8} {r['user_id']} {r['field']}: "
              f"{r['old_text'] or '(none)'} -> {r['text']}")


@request_options(ProposalsRequest)
def proposals_list_cmd(
    *, given: Given, db: DbOpt = None, fmt: FormatOpt = None, as_json: JsonOpt = False,
) -> None:
    """Proposed changes to preferred name, pronouns, city, language (pending: 7 days)."""
    from memcli.lifecycle.proposals import list_proposals

    with errors():
        req = given.request("proposals request")
        with open_memory(db, with_embedder=False, must_exist=True) as memory:
            rows = list_proposals(memory.db, status=None if req.status == "all" else req.status,
                                  tenant_id=req.tenant_id, user_id=req.user_id, limit=req.limit)
        emit(rows, resolve_format(fmt, as_json), _proposal_text)


@request_options(ProposalRequest)
def proposals_accept_cmd(
    proposal_id: ProposalIdArg, *, given: Given,
    db: DbOpt = None, fmt: FormatOpt = None, as_json: JsonOpt = False,
) -> None:
    """Apply a proposal: write the new profile fact, supersede the old one."""
    from memcli.lifecycle.proposals import accept

    with errors():
        req = given.request("accept request", proposal_id=proposal_id)
        with open_memory(db, exists=True) as memory:
            out = accept(memory, req.proposal_id, owner=memory.owner())
        emit(out, resolve_format(fmt, as_json),
             lambda p: print(f"accepted {p['id']}: memory {p['memory_id']}"))


@request_options(RejectRequest)
def proposals_reject_cmd(
    proposal_id: ProposalIdArg, *, given: Given,
    db: DbOpt = None, fmt: FormatOpt = None, as_json: JsonOpt = False,
) -> None:
    """Refuse a proposal (recorded in history; nothing changes)."""
    from memcli.lifecycle.proposals import reject

    on_one(given, "reject request",
           lambda memory, req: reject(memory.db, req.proposal_id, owner=memory.owner(),
                                      reason=req.reason),
           lambda p: print(f"rejected {p['id']}"), db, fmt, as_json, proposal_id=proposal_id)


def register(app: typer.Typer) -> None:
    for name, command in (("consolidate", consolidate_cmd), ("decay", decay_cmd),
                          ("reflect", reflect_cmd), ("insights", insights_cmd),
                          ("remember", remember_cmd), ("confirm", confirm_cmd),
                          ("pin", pin_cmd), ("unpin", unpin_cmd)):
        app.command(name)(command)
    proposals = typer.Typer(
        help="Consent for sensitive profile changes: list, accept, reject.", no_args_is_help=True)
    proposals.command("list")(proposals_list_cmd)
    proposals.command("accept")(proposals_accept_cmd)
    proposals.command("reject")(proposals_reject_cmd)
    app.add_typer(proposals, name="proposals")
