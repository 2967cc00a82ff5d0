"""Query: the hit contract, filters in SQL, scopes and widening, output shaping, hostile text."""

from __future__ import annotations

import json
import shutil
import time

import pytest

from memcli import Memory
from memcli.config import RetrievalSettings
from memcli.core.records import utcnow
from memcli.core.tokens import count_tokens
from memcli.providers.embedders import HashEmbedder
from memcli.store import memories as mem
from memcli.store.filters import Filters
from memcli.store.opener import open_database
from tests.support.backend import is_pg
from tests.support.records import ndjson, turns

# conftest: no SPLADE, one click command; SQLite and PostgreSQL (tests/support/backend.py)
pytestmark = [pytest.mark.usefixtures("fast_cli"), pytest.mark.backends]


def query(cli, *args, input=None) -> list[dict]:
    result = cli("query", *args, input=input)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


# A small corpus where every record mentions kiwi, with every filterable field varied.
CORPUS = [
    {
        "event_id": "A",
        "text": "kiwi pie for the picnic",
        "user_id": "u1",
        "session_id": "s1",
        "actor": {"type": "human", "id": "alice"},
        "category": "event",
        "importance": 0.9,
        "pinned": True,
    },
    {
        "event_id": "B",
        "text": "kiwi sorbet is the goal",
        "user_id": "u1",
        "session_id": "s1",
        "actor": {"type": "assistant", "id": "bot"},
        "category": "goals",
        "importance": 0.2,
    },
    {
        "event_id": "C",
        "text": "kiwi juice every morning",
        "user_id": "u1",
        "session_id": "s2",
        "channel": "team",
        "actor": {"type": "human", "id": "alice"},
        "category": "preferences",
    },
    {
        "event_id": "D",
        "text": "plant kiwi vines in spring",
        "user_id": "u2",
        "session_id": "s3",
        "channel": "public",
        "actor": {"type": "human", "id": "bob"},
        "category": "tasks",
        "importance": 0.7,
    },
    {
        "event_id": "E",
        "text": "kiwi farm visit planned",
        "user_id": "u1",
        "session_id": "s9",
        "tenant_id": "t2",
        "category": "event",
        "agent_id": "planner-1",
        "app_id": "app-x",
    },
    {
        "event_id": "F",
        "text": "kiwi prices from the tool",
        "user_id": "u2",
        "session_id": "s3",
        "actor": {"type": "tool", "id": "pricer"},
        "category": "knowledge",
        "importance": 0.4,
        "run_id": "r1",
    },
]


def _field(rec: dict, name: str):
    defaults = {"tenant_id": "default", "channel": "private", "importance": 0.5, "pinned": False}
    if name == "role":
        return rec.get("actor", {}).get("type", "human")
    if name == "actor_id":
        return rec.get("actor", {}).get("id")
    return rec.get(name, defaults.get(name))


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory):
    """The corpus ingested once, in two batches, with the embedder the CLI uses (hash, 64-d)."""
    path = tmp_path_factory.mktemp("corpus") / "corpus.db"
    with Memory.open(path, embedder=HashEmbedder(64)) as m:
        assert len(m.ingest(CORPUS[:3]).created) == 3
        time.sleep(0.01)
        boundary = utcnow()
        time.sleep(0.01)
        assert len(m.ingest(CORPUS[3:]).created) == 3
    return path, boundary


@pytest.fixture
def corpus(corpus_file, db_path):
    """A fresh copy of the corpus as this test's database; returns the time between batches."""
    path, boundary = corpus_file
    if is_pg(db_path):  # ingested again, in the same two batches
        with Memory.open(db_path, embedder=HashEmbedder(64)) as m:
            m.ingest(CORPUS[:3])
            time.sleep(0.01)
            boundary = utcnow()
            time.sleep(0.01)
            m.ingest(CORPUS[3:])
        return boundary
    shutil.copyfile(path, db_path)
    return boundary


FILTER_CASES = [
    (["--user", "u1"], lambda r: _field(r, "user_id") == "u1"),
    (["--user", "u2"], lambda r: _field(r, "user_id") == "u2"),
    (["--session", "s1", "--no-widen"], lambda r: _field(r, "session_id") == "s1"),
    (["--tenant", "t2"], lambda r: _field(r, "tenant_id") == "t2"),
    (
        ["--category", "goals", "--category", "tasks"],
        lambda r: _field(r, "category") in ("goals", "tasks"),
    ),
    (["--role", "human"], lambda r: _field(r, "role") == "human"),
    (["--role", "tool"], lambda r: _field(r, "role") == "tool"),
    (["--actor", "alice"], lambda r: _field(r, "actor_id") == "alice"),
    (["--pinned"], lambda r: _field(r, "pinned")),
    (["--unpinned"], lambda r: not _field(r, "pinned")),
    (["--importance-min", "0.6"], lambda r: _field(r, "importance") >= 0.6),
    (["--importance-max", "0.45"], lambda r: _field(r, "importance") <= 0.45),
    (
        ["--importance-min", "0.3", "--importance-max", "0.6"],
        lambda r: 0.3 <= _field(r, "importance") <= 0.6,
    ),
    (
        ["--channel", "team", "--channel", "public"],
        lambda r: _field(r, "channel") in ("team", "public"),
    ),
    (["--app", "app-x", "--tenant", "t2"], lambda r: _field(r, "app_id") == "app-x"),
    (["--run", "r1"], lambda r: _field(r, "run_id") == "r1"),
    (["--agent-id", "planner-1", "--tenant", "t2"],
     lambda r: _field(r, "agent_id") == "planner-1"),
    (["--kind", "episode", "--user", "u2"], lambda r: _field(r, "user_id") == "u2"),
    (
        ["--user", "u1", "--tenant", "default", "--role", "human"],
        lambda r: (
            (_field(r, "user_id"), _field(r, "tenant_id"), _field(r, "role"))
            == ("u1", "default", "human")
        ),
    ),
]


@pytest.mark.parametrize(
    ("flags", "keep"), FILTER_CASES, ids=[" ".join(f) for f, _ in FILTER_CASES]
)
def test_filters_are_respected(cli, corpus, flags, keep):
    hits = query(cli, "kiwi", "--top-k", "50", *flags)
    # No --tenant: the default tenant only (section 9.3 of the Agent Memory System PRD: every
    # query filters by tenant).
    tenant = flags[flags.index("--tenant") + 1] if "--tenant" in flags else "default"
    expected = sorted(
        r["event_id"] for r in CORPUS if keep(r) and _field(r, "tenant_id") == tenant)
    assert expected, "a filter case must keep something"
    assert sorted(h["event_id"] for h in hits) == expected


def test_updated_after_and_before(cli, corpus):
    after = query(cli, "kiwi", "--top-k", "50", "--updated-after", corpus, "--all-tenants")
    before = query(cli, "kiwi", "--top-k", "50", "--updated-before", corpus, "--all-tenants")
    assert sorted(h["event_id"] for h in after) == ["D", "E", "F"]
    assert sorted(h["event_id"] for h in before) == ["A", "B", "C"]
    bad = cli("query", "kiwi", "--updated-after", "last tuesday")
    assert bad.exit_code == 2 and bad.stderr.startswith("memcli: error: ")


def test_kind_filter_sees_non_episode_memories(cli, corpus, db_path):
    with Memory.open(db_path) as m, m.db.transaction():
        now = utcnow()
        mem.insert_memory(
            m.db,
            {
                "kind": "fact",
                "category": "knowledge",
                "content": "kiwi is a fruit from New Zealand",
                "user_id": "u1",
                "tenant_id": "default",
                "channel": "private",
                "sensitivity": "none",
                "event_time": now,
                "created_at": now,
                "updated_at": now,
            },
        )
    facts = query(cli, "kiwi", "--kind", "fact")
    assert [(h["kind"], h["event_id"]) for h in facts] == [("fact", None)]
    episodes = query(cli, "kiwi", "--kind", "episode", "--top-k", "50", "--all-tenants")
    assert len(episodes) == len(CORPUS) and {h["kind"] for h in episodes} == {"episode"}


def test_hit_contract(cli, corpus):
    hits = query(cli, "kiwi pie picnic", "--user", "u1", "--session", "s1", "--no-widen")
    top = hits[0]
    assert top["text"] == "kiwi pie for the picnic" and top["event_id"] == "A"
    assert isinstance(top["id"], int) and top["kind"] == "episode"
    assert 0 <= top["score"] <= 1 and top["category"] == "event"
    for key in (
        "tenant_id",
        "user_id",
        "agent_id",
        "session_id",
        "app_id",
        "run_id",
        "channel",
        "actor_type",
        "actor_id",
        "event_time",
        "importance",
        "pinned",
    ):
        assert key in top
    assert (top["tenant_id"], top["user_id"], top["session_id"]) == ("default", "u1", "s1")
    assert top["actor_id"] == "alice" and top["pinned"] is True and top["importance"] == 0.9
    assert {"lexical", "dense"} <= set(top["scores"])
    for leg in top["scores"].values():
        assert set(leg) == {"rank", "score"} and leg["rank"] >= 1
    assert top["scores"]["lexical"]["rank"] == 1
    assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)


def test_query_from_stdin_and_text_format(cli, corpus):
    assert [h["event_id"] for h in query(cli, "-", "--user", "u2", input="vines spring")][:1] == [
        "D"
    ]
    result = cli("query", "vines", "--format", "text", "--explain", "--user", "u2")
    assert result.exit_code == 0 and "plant kiwi vines" in result.stdout
    assert "lexical" in result.stdout


# -- filters run inside each leg's SQL, before its LIMIT ------------------------------------

LEG_TEXTS = {
    # leg: (text many other-user memories match better, the wanted memory's text, query)
    "lexical": (
        "mango mango",
        "a long note that mentions mango once among many other words",
        "mango",
    ),
    "trigram": ("芒果干芒果干", "我们上周在市场买了很多水果其中有芒果干和别的东西", "芒果干"),
    "entity": (
        "we love Zanzibar",
        "we should fly to Zanzibar sometime next year maybe",
        "Zanzibar",
    ),
    "dense": ("mango", "a long note that mentions mango once among many other words", "mango"),
}


@pytest.mark.parametrize("leg", [*LEG_TEXTS, "sparse"])
def test_filters_apply_before_each_legs_limit(db_path, leg):
    crowd, wanted, text = LEG_TEXTS.get(leg, LEG_TEXTS["lexical"])
    sparse = None
    if leg == "sparse":
        from memcli.providers.splade import SpladeEncoder

        sparse = SpladeEncoder()
    settings = RetrievalSettings(candidates_per_leg=5, leg_weights={leg: 1.0})
    with Memory(
        open_database(db_path), embedder=HashEmbedder(64), sparse=sparse, retrieval=settings
    ) as m:
        # The wanted memory comes first, so it would also win any tie on score or id.
        m.ingest([{"text": wanted, "user_id": "u2", "session_id": "w", "event_id": "w"}])
        m.ingest(
            [
                {"text": crowd, "user_id": "u1", "session_id": f"c{i}", "event_id": f"c{i}"}
                for i in range(20)
            ]
        )
        unfiltered = m.query(text, top_k=50, record_access=False)
        assert len(unfiltered.hits) == 5 and "w" not in {h.event_id for h in unfiltered.hits}
        hits = m.query(text, filters=m.filters(user_id="u2"), record_access=False).hits
        assert [h.event_id for h in hits] == ["w"]
        assert leg in hits[0].scores


# -- states, agents and scopes ----------------------------------------------------------------


def test_soft_deleted_memories_are_never_returned(cli, corpus, db_path):
    target = next(h for h in query(cli, "kiwi pie picnic") if h["event_id"] == "A")
    assert cli("forget", str(target["id"])).exit_code == 0
    for legs in ("lexical", "dense", "trigram,entity,lexical,dense"):
        hits = query(cli, "kiwi pie for the picnic", "--legs", legs, "--top-k", "50")
        assert target["id"] not in {h["id"] for h in hits}
    assert cli("restore", str(target["id"])).exit_code == 0
    assert target["id"] in {h["id"] for h in query(cli, "kiwi pie picnic")}


def test_agent_may_not_ask_for_a_category_outside_its_allowlist(cli, corpus):
    result = cli("query", "kiwi", "--agent-id", "planner", "--categories", "preferences")
    assert result.exit_code == 2
    assert result.stdout == ""
    line = result.stderr.strip()
    assert line.startswith("memcli: error: agent 'planner' may not read category preferences")
    assert "goals" in line and len(line.splitlines()) == 1


def test_agent_queries_stay_inside_its_allowlist(cli, corpus):
    hits = query(cli, "kiwi juice preferences morning", "--agent", "planner", "--top-k", "50")
    assert {h["category"] for h in hits} == {"goals", "tasks"}
    stylist = query(cli, "kiwi", "--agent", "stylist", "--top-k", "50")
    assert [h["event_id"] for h in stylist] == ["C"]
    # An agent the allowlists do not name reads what a person reads (the shipped `default:`).
    person = query(cli, "kiwi", "--top-k", "50")
    unlisted = query(cli, "kiwi", "--agent-id", "someone-unlisted", "--top-k", "50")
    assert [h["id"] for h in unlisted] == [h["id"] for h in person]


def test_session_widens_to_its_user_when_thin(cli):
    records = (
        turns("s1", ["we talked about the weather"], user="u1")
        + turns("s2", ["the kiwi smoothie recipe"], user="u1")
        + turns("s3", ["kiwi farm of someone else"], user="u2")
    )
    assert cli("ingest", "-", input=ndjson(records)).exit_code == 0
    hits = query(cli, "kiwi", "--session", "s1")
    sessions = {h["session_id"] for h in hits}
    assert "s2" in sessions and "s3" not in sessions
    narrow = query(cli, "kiwi", "--session", "s1", "--no-widen")
    assert {h["session_id"] for h in narrow} == {"s1"}


def test_recall_cue_widens_a_full_session(cli):
    records = turns("s1", ["kiwi one", "kiwi two", "kiwi three", "kiwi four"], user="u1") + turns(
        "s2", ["kiwi smoothie from an older chat"], user="u1"
    )
    assert cli("ingest", "-", input=ndjson(records)).exit_code == 0
    plain = query(cli, "kiwi smoothie", "--session", "s1", "--top-k", "50")
    assert {h["session_id"] for h in plain} == {"s1"}
    for cue in ("what kiwi smoothie did I mention last time", "之前说的 kiwi smoothie"):
        hits = query(cli, cue, "--session", "s1", "--top-k", "50")
        assert "s2" in {h["session_id"] for h in hits}, cue
    hits = query(cli, "kiwi smoothie last time", "--session", "s1", "--no-widen", "--top-k", "50")
    assert {h["session_id"] for h in hits} == {"s1"}


def test_widening_a_session_without_a_user_stays_private(cli):
    records = [{"event_id": "x", "text": "a note without an owner", "session_id": "anon"}] + turns(
        "s3", ["kiwi farm of someone else"], user="u2"
    )
    assert cli("ingest", "-", input=ndjson(records)).exit_code == 0
    hits = query(cli, "kiwi", "--session", "anon")
    assert {h["session_id"] for h in hits} <= {"anon"}


def test_widening_looks_up_the_user_in_the_right_tenant(cli):
    records = (
        turns("s1", ["tenant one chat"], user="a", tenant_id="t1")
        + turns("s1", ["tenant two chat"], user="b", tenant_id="t2")
        + turns("s2", ["kiwi plans of b"], user="b", tenant_id="t2")
    )
    for r in records:
        r["event_id"] = f"{r['tenant_id']}-{r['event_id']}"
    assert cli("ingest", "-", input=ndjson(records)).exit_code == 0
    hits = query(cli, "kiwi", "--tenant", "t2", "--session", "s1")
    assert "s2" in {h["session_id"] for h in hits}


# -- shaping the answer -----------------------------------------------------------------------


@pytest.fixture
def five(cli):
    texts = [f"note {i} about the orchard and its kiwi trees, row {i}" for i in range(5)]
    assert cli("ingest", "-", input=ndjson(turns("s1", texts))).exit_code == 0


def test_top_k(cli, five):
    everything = query(cli, "orchard kiwi", "--top-k", "50")
    assert len(everything) == 5
    two = query(cli, "orchard kiwi", "--top-k", "2")
    assert [h["id"] for h in two] == [h["id"] for h in everything[:2]]
    assert cli("query", "x", "--top-k", "0").exit_code == 2


def test_threshold(cli, five):
    # The threshold reads relevance, a probability comparable across queries (the fused
    # score is normalised within each query: tests/retrieval/test_query_relevance.py).
    everything = query(cli, "orchard kiwi row 3", "--top-k", "50")
    values = sorted(h["relevance"] for h in everything)
    cut = (values[0] + values[-1]) / 2
    kept = query(cli, "orchard kiwi row 3", "--top-k", "50", "--threshold", str(cut))
    assert 0 < len(kept) < len(everything)
    assert all(h["relevance"] >= cut for h in kept)
    assert cli("query", "orchard kiwi", "--threshold", "1.01", "--json").exit_code == 2


def test_bullets(cli, corpus):
    long = "kiwi " + "and a very long digression " * 40
    assert cli("ingest", "--text", long, "--category", "knowledge").exit_code == 0
    hits = query(cli, "kiwi", "--return", "bullets", "--top-k", "50", "--all-tenants")
    assert len(hits) == len(CORPUS) + 1
    for hit in hits:
        assert hit["text"].startswith(f"[{hit['category']}] ")
        assert "\n" not in hit["text"] and len(hit["text"]) <= 300
    assert any(h["text"].endswith("…") for h in hits)


def test_budget_tokens_is_never_exceeded(cli, five, db_path):
    everything = query(cli, "orchard kiwi", "--top-k", "50")
    costs = [count_tokens(h["text"]) for h in everything]
    for budget in (1, costs[0], costs[0] + costs[1] - 1, costs[0] + costs[1], sum(costs) + 5):
        hits = query(cli, "orchard kiwi", "--top-k", "50", "--budget-tokens", str(budget))
        used = sum(count_tokens(h["text"]) for h in hits)
        assert used <= budget
        assert [h["id"] for h in hits] == [h["id"] for h in everything[: len(hits)]]
        assert all(h["tokens"] == count_tokens(h["text"]) for h in hits)
    assert query(cli, "orchard kiwi", "--budget-tokens", "1") == []
    assert (
        len(
            query(cli, "orchard kiwi", "--top-k", "50", "--budget-tokens", str(costs[0] + costs[1]))
        )
        == 2
    )


def test_access_count_and_last_accessed(memory):
    memory.ingest(turns("s1", ["the kiwi orchard", "the apple orchard", "pear trees"]))
    before = {r["id"]: r for r in memory.db.query("SELECT * FROM memories")}
    assert all(r["access_count"] == 0 and r["last_accessed"] is None for r in before.values())
    hits = memory.query("kiwi orchard", top_k=1).hits
    memory.query("kiwi orchard", top_k=1)
    after = {r["id"]: r for r in memory.db.query("SELECT * FROM memories")}
    assert after[hits[0].id]["access_count"] == 2 and after[hits[0].id]["last_accessed"]
    others = [mid for mid in after if mid != hits[0].id]
    assert all(after[mid]["access_count"] == 0 for mid in others)
    memory.query("kiwi orchard", top_k=1, record_access=False)
    assert memory.db.scalar("SELECT access_count FROM memories WHERE id = ?", (hits[0].id,)) == 2


HOSTILE = [
    '"',
    '""',
    "'",
    'say "hello',
    "AND",
    "OR",
    "NOT",
    "a AND b OR NOT c",
    "*",
    "kiwi*",
    "^kiwi",
    "NEAR(kiwi pie)",
    "NEAR(",
    "(((",
    ")",
    "kiwi)",
    "content:kiwi",
    "context: kiwi",
    "{content context}: kiwi",
    "-kiwi",
    "+",
    "kiwi:",
    ":",
    "\\",
    "%",
    "_",
    "'; DROP TABLE x;--",
    "\x00",
    "kiwi\x00pie",
    "\u200b",
    "🥝🥝🥝",
    "キウイ",
    "ｋｉｗｉ",
    "rowid",
    "memories_fts",
]


def test_fts_hostile_queries_never_raise(memory):
    memory.ingest(turns("s1", ["kiwi pie for the picnic", "キウイのパイ"]))
    failures = {}
    for legs in ({"lexical": 1.0}, {"trigram": 1.0}, {"entity": 1.0}, None):
        memory.retrieval = RetrievalSettings(**({"leg_weights": legs} if legs else {}))
        for text in HOSTILE:
            try:
                memory.query(text, top_k=5)
            except Exception as exc:  # noqa: BLE001 - collect them all for one clear report
                failures[(text, str(legs))] = repr(exc)
    assert failures == {}


def test_fts_hostile_queries_through_the_cli(cli):
    assert cli("ingest", "--text", "kiwi pie for the picnic").exit_code == 0
    for text in ("content:kiwi", "NEAR(kiwi", '"kiwi', "kiwi AND OR NOT ^*"):
        hits = query(cli, text, "--legs", "lexical")
        assert [h["text"] for h in hits] == ["kiwi pie for the picnic"], text


def test_empty_result_is_an_empty_array(cli, db_path):
    Memory.open(db_path).close()  # an empty memcli database (a missing one is an error)
    result = cli("query", "anything at all")
    assert result.exit_code == 0 and result.stdout.strip() == "[]"
    assert cli("ingest", "--text", "kiwi", "--user", "u1").exit_code == 0
    result = cli("query", "kiwi", "--user", "nobody")
    assert result.exit_code == 0 and result.stdout.strip() == "[]"
    result = cli("query", "kiwi", "--user", "nobody", "--format", "jsonl")
    assert result.exit_code == 0 and result.stdout == ""
    empty = cli("query", "   ")
    assert empty.exit_code == 2 and "empty query" in empty.stderr


def test_chinese_is_found_by_a_chinese_query(cli):
    records = turns(
        "s1", ["我们上周在成都吃了火锅", "The meeting moved to Thursday", "明天去北京出差"]
    )
    assert cli("ingest", "-", input=ndjson(records)).exit_code == 0
    hits = query(cli, "在成都吃了火锅吗", "--legs", "trigram")
    matched = [h["text"] for h in hits if "trigram" in h["scores"]]
    assert matched == ["我们上周在成都吃了火锅"]
    hits = query(cli, "在成都吃了什么", "--no-widen")
    assert "trigram" in next(h for h in hits if h["text"] == "我们上周在成都吃了火锅")["scores"]
    assert query(cli, "北京出差", "--legs", "trigram", "--session", "s1", "--no-widen")


def test_the_only_match_outranks_the_neighbours_it_pulls_in(memory):
    memory.ingest(
        turns("s1", ["我们上周在成都吃了火锅", "The meeting moved to Thursday", "明天去北京出差"])
    )
    memory.retrieval = RetrievalSettings(leg_weights={"trigram": 0.5})
    hits = memory.query("在成都吃了火锅吗").hits
    assert hits[0].text == "我们上周在成都吃了火锅"
    assert all(h.score < hits[0].score for h in hits[1:])


def test_filters_object_renders_one_where_clause():
    where, params = Filters(
        user_id="u1", categories=("a", "b"), pinned=True, allowed_categories=()
    ).sql()
    assert where.count("?") == len(params)
    # No tenant named: the default tenant, never all of them.
    assert params[:2] == ["default", "u1"] and {"a", "b", 1} <= set(params)
    everywhere, params = Filters(all_tenants=True).sql()
    assert "tenant_id" not in everywhere
    assert "1 = 0" in where.split(" AND ")  # an empty allowlist matches nothing


def test_preload_loads_models_on_the_query_worker_thread():
    import threading

    from memcli.retrieval import search

    seen: list[str] = []

    class Model:
        def load(self) -> None:
            seen.append(threading.current_thread().name)

    class Broken:
        def load(self) -> None:
            raise RuntimeError("no weights")  # reported later by the query's own call

    model, broken = Model(), Broken()
    search.preload_models(model, broken)
    search.preload_models(None, None)  # nothing to do
    for m in (model, broken):  # each model's queue has drained
        search._model_worker(m).submit(lambda: None).result(timeout=10)
    assert seen == ["memcli-Model_0"]
    # One worker per model class: the two models load side by side, each on its own thread.
    assert search._model_worker(model) is search._model_worker(Model())
    assert search._model_worker(model) is not search._model_worker(broken)


def test_warming_the_query_models_runs_the_local_ones_and_calls_no_remote_one():
    """A spare command process of `memcli serve` warms the query models before its request:
    each local model (it has a `load()`) encodes once on its query thread; a remote embedder
    (no `load()`: its first call would be a request to its provider) is not called."""
    import threading

    from memcli.retrieval import search

    calls: list[tuple[str, str, str]] = []

    class LocalSparse:
        def load(self) -> None:
            pass

        def encode_query(self, text: str) -> dict[int, float]:
            calls.append(("sparse", text, threading.current_thread().name))
            return {1: 1.0}

    class Remote:
        def embed_query(self, text: str) -> list[float]:
            calls.append(("remote", text, threading.current_thread().name))
            return [1.0]

    search.warm_query_models(Remote(), LocalSparse())
    assert calls == [("sparse", "warm", "memcli-LocalSparse_0")]


def test_a_widened_query_embeds_its_text_once(memory):
    """A session search that widens to the user runs the legs twice, on one query vector."""
    from tests.support.records import record_calls, turns

    calls = record_calls(memory.embedder, "embed_query")
    memory.ingest(turns("s1", ["the budget meeting ran long"]))
    memory.ingest(turns("s2", ["we talked about the garden before"]))
    result = memory.query("what did we say before about the garden",
                          filters=memory.filters(session_id="s1", user_id="u1"))
    assert result.scope == "user" and result.hits
    assert calls == ["what did we say before about the garden"]
    memory.query("another question", filters=memory.filters(user_id="u1"))
    assert len(calls) == 2  # a new text is embedded again


def test_lexical_leg_on_the_reader_connection_gives_the_same_hits(memory, monkeypatch):
    """With a reader connection the lexical leg runs on another thread; same lists either way."""
    import threading

    from memcli.retrieval import search
    from tests.support.records import turns

    seen: list[tuple[str, bool]] = []
    real = search.search_sql.lexical

    def spy(db, *args, **kwargs):
        seen.append((threading.current_thread().name, db is memory._reader))
        return real(db, *args, **kwargs)

    monkeypatch.setattr(search.search_sql, "lexical", spy)

    texts = [f"the zephyr review number {i} with Ines and the budget" for i in range(30)]
    memory.ingest(turns("s1", texts) + turns("s2", ["zephyr budget again", "other"]))
    filters = memory.filters(user_id="u1")
    reader = memory.reader()
    assert reader is not None and reader is memory.reader()  # opened once, then reused
    together = search.run_legs(memory.db, memory.embedder, "zephyr budget review", filters,
                               memory.retrieval, reader=reader)
    alone = search.run_legs(memory.db, memory.embedder, "zephyr budget review", filters,
                            memory.retrieval)
    assert together["lexical"] and together == alone
    assert list(together) == list(alone)  # the same leg order, so fusion adds the same way
    assert seen[0][0].startswith("memcli-sql") and seen[0][1]  # on the reader, other thread
    assert seen[1] == (threading.current_thread().name, False)


def test_no_reader_inside_a_write_transaction(memory):
    """The reader would not see uncommitted rows: a query inside a transaction stays on db."""
    from tests.support.records import turns

    with memory.db.transaction():
        assert memory.reader() is None
        memory.ingest(turns("s9", ["a quokka named Quentin"]))
        hits = memory.query("quokka", filters=memory.filters(user_id="u1"),
                            record_access=False).hits
        assert [h.text for h in hits] == ["a quokka named Quentin"]
    assert memory.reader() is not None
