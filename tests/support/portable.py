"""Helpers for tests/importers/test_portable.py (export / import); not a test module.

`apply_ops` writes a history through the library's ordinary write paths (ingest, remember,
forget, correct, decisions and supersede, tasks, checkpoints, proposals) into a real database,
across two tenants and two users; `ops()` is the hypothesis strategy that generates such
histories.
"""

from __future__ import annotations

import io
from typing import Any

from hypothesis import strategies as st

from memcli import Memory
from memcli.config import LifecycleSettings
from memcli.errors import MemcliError
from memcli.portable.exporter import Scope, export
from memcli.providers.embedders import HashEmbedder

TENANTS = ("default", "t2")
USERS = ("u1", "u2")
WORDS = ("alice", "tea", "green", "paris", "deploy", "sqlite", "postgres", "nurse", "coffee",
         "bob", "build", "release", "café", "東京", "line\u2028sep", "tab\there", "\"quote\"")
KEY = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="  # base64 of 32 bytes: a test key
OTHER_KEY = "HxscGxoZGBcWFRQTEhEQDw4NDAsKCQgHBgUEAwIBAAA="

texts = st.lists(st.sampled_from(WORDS), min_size=1, max_size=5).map(" ".join)
tenants = st.sampled_from(TENANTS)
users = st.sampled_from(USERS)
picks = st.integers(min_value=0, max_value=50)

_turn = st.tuples(
    st.just("turn"), tenants, users, st.integers(0, 1),
    st.sampled_from(("message", "tool_call", "tool_result", "decision", "task_update",
                     "artifact")),
    st.sampled_from(("none", "none", "low", "high")), texts)
op = st.one_of(
    _turn, _turn,
    st.tuples(st.just("remember"), tenants, users, texts),
    st.tuples(st.just("forget"), picks),
    st.tuples(st.just("correct"), picks, texts),
    st.tuples(st.just("decision"), tenants, users, texts),
    st.tuples(st.just("supersede"), picks, texts),
    st.tuples(st.just("task"), tenants, users, texts),
    st.tuples(st.just("task_update"), picks, st.sampled_from(("doing", "done"))),
    st.tuples(st.just("checkpoint"), tenants, users, st.sampled_from(("t1", "t2")),
              st.sampled_from(("none", "high")), texts),
    st.tuples(st.just("proposal"), tenants, users, texts),
)


def ops(max_size: int = 12):
    return st.lists(op, min_size=1, max_size=max_size)


def open_memory(path, tenant: str = "default") -> Memory:
    from memcli.config import Settings

    return Memory.open(path, embedder=HashEmbedder(64), settings=Settings(db=path, tenant=tenant))


def _content(kind: str, text: str) -> dict[str, Any]:
    if kind == "tool_call":
        return {"name": "search", "args": {"q": text}}
    if kind == "tool_result":
        return {"output": text}
    return {"text": text}


def _pick(memory: Memory, sql: str, n: int) -> tuple | None:
    rows = list(memory.db.execute(sql))
    return rows[n % len(rows)] if rows else None


def apply_ops(memory: Memory, history: list[tuple]) -> None:
    """Write `history` through the library; an operation the library refuses (a correction of
    an episode, a superseded decision...) is skipped, as a user would see it refused."""
    from memcli.ledger import entries as ledger
    from memcli.lifecycle import proposals
    from memcli.lifecycle.correct import correct_fact
    from memcli.lifecycle.purge import forget
    from memcli.lifecycle.remember import remember

    for step, item in enumerate(history):
        name, *args = item
        try:
            if name == "turn":
                tenant, user, session, kind, sensitivity, text = args
                memory.ingest([{"tenant_id": tenant, "user_id": user,
                                "session_id": f"{user}-s{session}", "kind": kind,
                                "sensitivity": sensitivity, "content": _content(kind, text),
                                "ts": f"2025-01-01T10:{step:02d}:00Z"}])
            elif name == "big_result":  # over 64 KB: an excerpt in the event, an artifact
                tenant, user = args
                lines = "\n".join(f"build line {i} ok" for i in range(5000))
                memory.ingest([{"tenant_id": tenant, "user_id": user, "session_id": f"{user}-s0",
                                "kind": "tool_result", "content": {"output": lines},
                                "ts": f"2025-01-01T10:{step:02d}:00Z"}])
            elif name == "app_turn":
                tenant, user, app, text = args
                memory.ingest([{"tenant_id": tenant, "user_id": user, "app_id": app,
                                "session_id": f"{user}-{app}", "content": {"text": text},
                                "ts": f"2025-01-01T10:{step:02d}:00Z"}])
            elif name == "remember":
                tenant, user, text = args
                remember(memory, LifecycleSettings(), text=f"{user} likes {text}",
                         tenant_id=tenant, user_id=user)
            elif name == "forget":
                row = _pick(memory, "SELECT id, tenant_id FROM memories WHERE state = 'active'"
                                    " ORDER BY id", args[0])
                if row:
                    forget(memory.db, row[0], owner=memory.owner(row[1]))
            elif name == "correct":
                row = _pick(memory, "SELECT id, tenant_id FROM memories WHERE kind = 'fact'"
                                    " AND state = 'active' ORDER BY id", args[0])
                if row:
                    correct_fact(memory, row[0], f"corrected {args[1]}",
                                 owner=memory.owner(row[1]))
            elif name == "decision":
                tenant, user, text = args
                ledger.add_decision(memory, f"use {text}", rationale=[text], tenant_id=tenant,
                                    user_id=user)
            elif name == "supersede":
                row = _pick(memory, "SELECT id, tenant_id FROM decisions WHERE status = 'active'"
                                    " ORDER BY id", args[0])
                if row:
                    ledger.supersede_decision(memory, row[0], f"now {args[1]}",
                                              owner=memory.owner(row[1]))
            elif name == "task":
                tenant, user, text = args
                ledger.add_task(memory, f"do {text}", tenant_id=tenant, user_id=user)
            elif name == "task_update":
                row = _pick(memory, "SELECT id, tenant_id FROM tasks ORDER BY id", args[0])
                if row:
                    ledger.update_task(memory, row[0], status=args[1],
                                       owner=memory.owner(row[1]))
            elif name == "checkpoint":
                tenant, user, thread, sensitivity, text = args
                ledger.save_checkpoint(memory, {"note": text, "step": step}, user_id=user,
                                       thread_id=thread, tenant_id=tenant,
                                       sensitivity=sensitivity)
            elif name == "proposal":
                tenant, user, text = args
                with memory.db.transaction():
                    proposals.propose(memory.db, tenant_id=tenant, user_id=user, field="city",
                                      value=text, text=f"{user} lives in {text}",
                                      origin="remember")
        except MemcliError:
            pass
        finally:
            memory.tenant = "default"


def dump(memory: Memory, tenant: str | None = None, **scope: Any) -> str:
    """The export of a scope as text (tenant None: every tenant)."""
    out = io.StringIO()
    export(memory.db, Scope(tenant, **scope), out)
    return out.getvalue()
