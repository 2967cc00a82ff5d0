"""Property tests: any text survives ingest and query, FTS quoting never breaks, purge is clean."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memcli import Memory
from memcli.config import RetrievalSettings
from memcli.policy.secrets import redact
from memcli.providers.embedders import HashEmbedder
from memcli.retrieval import text as qtext
from memcli.store import search_sql as sql
from memcli.store.filters import Filters
from tests.lifecycle.test_purge import orphan_counts

FAST = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# Text that is mostly FTS5 syntax, with some words and any unicode mixed in.
FTS_NOISE = st.lists(
    st.one_of(
        st.sampled_from(
            [
                '"',
                "'",
                "AND",
                "OR",
                "NOT",
                "NEAR(",
                "NEAR/2",
                "(",
                ")",
                "*",
                "^",
                ":",
                "content:",
                "context:",
                "{content}",
                "-",
                "+",
                ",",
                ".",
                "\\",
                "\x00",
                "kiwi",
                "pie",
                "キウイ",
                "火锅",
                "🥝",
            ]
        ),
        st.text(max_size=12),
    ),
    max_size=12,
).map(" ".join)


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """One database for every example (each example adds to it; nothing here depends on order)."""
    path = tmp_path_factory.mktemp("props") / "memory.db"
    with Memory.open(path, embedder=HashEmbedder(16)) as m:
        m.ingest(
            [
                {"text": "kiwi pie for the picnic", "session_id": "seed"},
                {"text": "我们在成都吃了火锅", "session_id": "seed"},
            ]
        )
        yield m


@FAST
@given(text=st.text(max_size=300))
def test_any_text_survives_ingest_and_query(shared, text):
    report = shared.ingest([{"text": text, "session_id": "p", "user_id": "prop"}])
    assert not report.rejected, report.rejected
    assert len(report.created) + len(report.skipped) == 1
    event_id = (report.created or report.skipped)[0]
    stored = json.loads(
        shared.db.scalar("SELECT content FROM events WHERE event_id = ?", (event_id,))
    )
    assert stored["text"] == redact(text).text
    shared.retrieval = RetrievalSettings()
    result = shared.query(text or "x", filters=shared.filters(user_id="prop"), top_k=5)
    assert all(h.user_id == "prop" for h in result.hits)


@FAST
@given(words=st.lists(st.from_regex(r"[A-Za-z]{3,12}", fullmatch=True), min_size=1, max_size=8))
def test_ascii_text_is_found_by_its_own_words(shared, words):
    text = " ".join(words) + " zzqprop"
    report = shared.ingest([{"text": text, "session_id": "words", "user_id": "words"}])
    shared.retrieval = RetrievalSettings(leg_weights={"lexical": 1.0})
    hits = shared.query(
        text, filters=shared.filters(user_id="words"), top_k=100, record_access=False
    ).hits
    ids = {h.id for h in hits}
    wanted = report.memory_ids or [
        r[0]
        for r in shared.db.execute(
            "SELECT id FROM memories WHERE event_id = ?", ((report.skipped or [""])[0],)
        )
    ]
    assert set(wanted) <= ids


@FAST
@given(text=st.one_of(FTS_NOISE, st.text(max_size=200)))
def test_fts_quoting_never_raises(shared, text):
    query = qtext.lexical_query(text)
    sql.lexical(shared.db, query, Filters(), 10)
    sql.trigram(shared.db, query, Filters(), 10)
    for legs in ({"lexical": 1.0, "trigram": 1.0, "entity": 1.0}, None):
        shared.retrieval = RetrievalSettings(**({"leg_weights": legs} if legs else {}))
        shared.query(text or "x", top_k=3, record_access=False)


# -- purge ------------------------------------------------------------------------------------

SESSIONS = ["s1", "s2", "s3", "s4"]
OWNER = {"s1": ("t1", "u1"), "s2": ("t1", "u1"), "s3": ("t1", "u2"), "s4": ("t2", "u1")}
WORDS = [
    "Alice",
    "Bob",
    "kiwi",
    "Paris",
    "#launch",
    "@carol",
    "2024-05-01",
    "meeting",
    "火锅",
    "https://example.com/x",
    "the",
    "plan",
]

ingest_op = st.tuples(
    st.just("ingest"),
    st.sampled_from(SESSIONS),
    st.sampled_from(["app1", None]),
    st.lists(st.sampled_from(WORDS), min_size=1, max_size=6).map(" ".join),
    st.booleans(),  # a long text, cut into several chunks
)
purge_op = st.tuples(
    st.just("purge"),
    st.sampled_from(["session_id", "user_id", "tenant_id", "app_id", "memory_id"]),
    st.integers(0, 50),
)
forget_op = st.tuples(st.just("forget"), st.integers(0, 50))
relate_op = st.tuples(st.just("relate"), st.integers(0, 50), st.integers(0, 50))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ops=st.lists(
        st.one_of(ingest_op, ingest_op, purge_op, forget_op, relate_op), min_size=1, max_size=14
    )
)
def test_purge_leaves_no_orphan_rows(ops):
    from memcli.store import relations as rel

    with (
        tempfile.TemporaryDirectory() as tmp,
        Memory.open(Path(tmp) / "m.db", embedder=HashEmbedder(16)) as m,
    ):
        for n, op in enumerate(ops):
            rows = list(m.db.execute("SELECT id, tenant_id FROM memories ORDER BY id"))
            ids = [r[0] for r in rows]
            if op[0] == "ingest":
                _, session, app, text, long = op
                tenant, user = OWNER[session]
                if long:
                    text = " ".join([text] * 400)
                m.ingest(
                    [
                        {
                            "text": f"{text} #{n}",
                            "session_id": session,
                            "tenant_id": tenant,
                            "user_id": user,
                            "app_id": app,
                        }
                    ]
                )
            elif op[0] == "forget" and ids:
                mid, tenant = rows[op[1] % len(rows)]
                m.forget(mid, m.owner(tenant))  # forget acts in the memory's own tenant
            elif op[0] == "relate" and len(ids) > 1:
                with m.db.transaction():
                    rel.add_edge(m.db, ids[op[1] % len(ids)], ids[op[2] % len(ids)], "related", 1)
            elif op[0] == "purge":
                _, key, pick = op
                values = {
                    "session_id": SESSIONS,
                    "user_id": ["u1", "u2"],
                    "tenant_id": ["t1", "t2"],
                    "app_id": ["app1"],
                    "memory_id": ids or [1],
                }[key]
                value = values[pick % len(values)]
                gone = m.purge(**{key: value})
                assert gone["events"] >= 0
                if key != "memory_id":
                    assert (
                        m.db.scalar(f"SELECT count(*) FROM events WHERE {key} = ?", (value,)) == 0
                    )
                    assert (
                        m.db.scalar(f"SELECT count(*) FROM memories WHERE {key} = ?", (value,)) == 0
                    )
                else:
                    assert m.db.scalar("SELECT count(*) FROM memories WHERE id = ?", (value,)) == 0
                assert orphan_counts(m) == dict.fromkeys(orphan_counts(m), 0), op
        # Whatever is left is still fully indexed: every memory has its FTS, trigram, vector rows.
        left = m.db.scalar("SELECT count(*) FROM memories")
        assert m.db.scalar("SELECT count(*) FROM memories_fts") == left
        assert m.db.scalar("SELECT count(*) FROM memories_trigram") == left
        assert m.db.scalar("SELECT count(*) FROM memory_vectors") == left
        assert m.db.scalar("SELECT count(*) FROM vec_memories") == left
        assert orphan_counts(m) == dict.fromkeys(orphan_counts(m), 0)
