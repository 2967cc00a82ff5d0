"""The query side of scope: widening on full-text evidence (the evolution plan), the answering
scope in every output format, the memory system spec's bullets, and one `memory.query` JSON
request on stdin for `query -`, in process and through the installed entry point."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from memcli import Memory
from memcli.config import AcbSettings
from memcli.providers.embedders import HashEmbedder
from tests.support.bundles import build_acb
from tests.support.cli import run_entry_point
from tests.support.records import ndjson, turns

# conftest: no SPLADE, one click command; SQLite and PostgreSQL (tests/support/backend.py)
pytestmark = [pytest.mark.usefixtures("fast_cli"), pytest.mark.backends]

ANSWER = "We decided the billing database will be PostgreSQL, not MongoDB."
OLD = ["Let's talk about the billing service.", ANSWER, "Invoices are generated monthly."]
WEATHER = ["It is raining in Lisbon today.", "Tomorrow will be sunny and warm.",
           "The wind picks up in the evening.", "Bring an umbrella on Friday.",
           "Fog in the morning, clear skies later.", "Snow is unlikely this winter."]
QUESTION = "which database for billing"


def history() -> list[dict]:
    """An old session holding the answer, then a new session about something else."""
    new = turns("new", WEATHER, user="priya")
    for r in new:
        r["ts"] = r["ts"].replace("2025-01-01", "2025-02-01")  # a month later
    return turns("old", OLD, user="priya") + new


@pytest.fixture
def chats(cli):
    assert cli("ingest", "-", input=ndjson(history())).exit_code == 0


def hits_of(result) -> list[dict]:
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


# -- 1. widening on full-text evidence ---------------------------------------------------------
def test_a_new_session_reaches_the_old_session_holding_the_answer(cli, chats):
    """The dense leg ranks all 6 weather turns of the new session, so counting every leg's
    hits never widened (4 weather turns came back); the session has no full-text hit for the
    question, so the evolution plan's `fts_hits < 3` widens to the user."""
    hits = hits_of(cli("query", "--session", "new", QUESTION, "--top-k", "3"))
    assert hits[0]["event_id"] == "old-1" and hits[0]["text"] == ANSWER
    assert {h["scope"] for h in hits} == {"user"}
    # --no-widen keeps the session: the old answer is out of reach.
    narrow = hits_of(cli("query", "--session", "new", QUESTION, "--no-widen"))
    assert {h["session_id"] for h in narrow} == {"new"}
    assert {h["scope"] for h in narrow} == {"session"}


def test_a_session_with_full_text_evidence_stays_in_the_session(cli, chats):
    more = turns("new2", ["billing database sizing", "billing database backups",
                          "the billing database runs on one node"], user="priya")
    assert cli("ingest", "-", input=ndjson(more)).exit_code == 0
    hits = hits_of(cli("query", "--session", "new2", QUESTION, "--top-k", "50"))
    assert {h["session_id"] for h in hits} == {"new2"}
    assert {h["scope"] for h in hits} == {"session"}
    # A recall cue still widens, whatever the session holds.
    cued = hits_of(cli("query", "--session", "new2", f"{QUESTION} last time", "--top-k", "50"))
    assert "old" in {h["session_id"] for h in cued}


def test_the_library_reports_the_scope_and_the_path(memory):
    memory.ingest(history())
    result = memory.query(QUESTION, filters=memory.filters(session_id="new"), top_k=3,
                          record_access=False)
    assert (result.scope, result.path) == ("user", "session>user")
    assert result.hits[0].text == ANSWER and {h.scope for h in result.hits} == {"user"}


def test_without_a_full_text_leg_the_ranked_hits_are_counted(cli, chats):
    """`--legs dense` has no lexical evidence to count: the session's 6 ranked turns keep it."""
    hits = hits_of(cli("query", "--session", "new", QUESTION, "--legs", "dense"))
    assert {h["scope"] for h in hits} == {"session"}


def test_a_bundle_widens_by_the_same_rule(db_path):
    """`acb build` shares the rule: the 4 session turns outside a 2-turn recent window hold
    no full-text evidence, so retrieval widens to the user and finds the old decision."""
    with Memory.open(db_path, embedder=HashEmbedder(64)) as m:
        m.ingest(history())
        bundle = build_acb(m, {"session_id": "new", "query_text": QUESTION, "track": False},
                           settings=AcbSettings(recent_turns=2))
    evidence = next(s for s in bundle["sections"] if s["name"] == "retrieved_evidence")
    assert ANSWER in evidence["items"][0]["text"]


def test_an_anonymous_sessions_bundle_never_widens_to_the_tenant(db_path):
    """A session without a user has no user scope to widen to; a bundle used to widen such a
    session to the whole tenant, so another user's memories reached it (query never did)."""
    with Memory.open(db_path, embedder=HashEmbedder(64)) as m:
        m.ingest([{"event_id": "a", "session_id": "anon", "text": "a note without an owner"}]
                 + turns("old", OLD, user="priya"))
        bundle = build_acb(m, {"session_id": "anon", "query_text": QUESTION, "track": False})
        found = m.query(QUESTION, filters=m.filters(session_id="anon"), record_access=False)
    evidence = next(s for s in bundle["sections"] if s["name"] == "retrieved_evidence")
    assert not any(ANSWER in item["text"] for item in evidence["items"])
    assert found.scope == "session" and ANSWER not in {h.text for h in found.hits}


# -- 2. the answering scope in every output format ---------------------------------------------
def test_every_format_shows_the_scope(cli, chats):
    args = ("query", "--session", "new", QUESTION, "--top-k", "2")
    for hit in hits_of(cli(*args, "--json")):
        assert hit["scope"] == "user"
    lines = cli(*args, "--format", "jsonl").stdout.splitlines()
    assert len(lines) == 2 and all(json.loads(line)["scope"] == "user" for line in lines)
    table = cli(*args, "--format", "text")
    assert table.exit_code == 0
    assert "[scope: user, widened from session]" in table.stdout
    kept = cli("query", "--session", "new", "umbrella Friday", "--no-widen", "--format", "text")
    assert "[scope: session]" in kept.stdout


# -- 3. bullets ------------------------------------------------------------------------------
def test_bullets_are_id_category_text(cli, chats):
    bullets = hits_of(cli("query", QUESTION, "--user", "priya", "--return", "bullets"))
    assert bullets
    for bullet in bullets:
        assert set(bullet) == {"id", "category", "text", "scope"}
        assert bullet["text"].startswith(f"[{bullet['category']}] ")
        assert bullet["scope"] == "user"
    assert bullets[0]["text"] == f"[event] {ANSWER}"


# -- 4. one memory.query JSON request on stdin --------------------------------------------------
REQUEST = {
    "agent": "supervisor",
    "query": QUESTION,
    "categories": ["event"],
    "filters": {"user_id": "priya", "session_id": "new", "role": "human", "pinned": False,
                "importance_min": 0, "importance_max": 1, "updated_after": "2024-07-01",
                "updated_before": None},
    "top_k": 2,
    "return": "bullets",
    "budget_tokens": 512,
    "threshold": 0.1,
}


def test_query_dash_reads_one_json_request(cli, chats):
    bullets = hits_of(cli("query", "-", input=json.dumps(REQUEST)))
    assert len(bullets) == 2 and set(bullets[0]) == {"id", "category", "text", "scope"}
    assert bullets[0]["text"] == f"[event] {ANSWER}" and bullets[0]["scope"] == "user"
    # A flag given on the command line wins over the request's field.
    one = hits_of(cli("query", "-", "--top-k", "1", "--return", "full",
                      input=json.dumps(REQUEST)))
    assert len(one) == 1 and one[0]["text"] == ANSWER and one[0]["session_id"] == "old"
    # The memory system spec's `filters.category` (6.1) says the same as `categories`.
    alias = {**REQUEST, "categories": None,
             "filters": {**REQUEST["filters"], "category": "event"}}
    assert hits_of(cli("query", "-", input=json.dumps(alias))) == bullets


def test_the_request_obeys_the_agents_allowlist(cli, chats):
    """planner may read goals and tasks only: asking for more is refused; asking for nothing
    in particular returns none of the event turns."""
    refused = cli("query", "-", input=json.dumps(
        {**REQUEST, "agent": "planner", "categories": ["preferences"]}))
    assert refused.exit_code == 2 and refused.stdout == ""
    assert refused.stderr.startswith("memcli: error: agent 'planner' may not read category")
    assert len(refused.stderr.splitlines()) == 1
    quiet = {**REQUEST, "agent": "planner", "categories": None}
    assert hits_of(cli("query", "-", input=json.dumps(quiet))) == []


@pytest.mark.parametrize(("stdin", "message"), [
    ('{"query": "billing", "colour": "red"}', "bad query request: colour: Extra inputs"),
    ('{"query": "billing", "top_k": 0}', "bad query request: top_k: Input should be greater"),
    ('{"query": "billing", "return": "summary"}', "bad query request: return: Input should be"),
    ('{"query": "   "}', "bad query request: query: the query is empty"),
    ('{"top_k": 3}', "bad query request: query: Field required"),
    ('{"query": "x", "filters": {"updated_after": "soon"}}',
     "bad query request: filters.updated_after: not an ISO 8601 time"),
    ('{"query": "billing", ', "the query request is not JSON"),
    ('{"query": "x", "categories": ["a"], "filters": {"category": "b"}}',
     "bad query request: categories and filters.category differ"),
])
def test_a_bad_request_is_exit_2_in_one_line(cli, chats, stdin, message):
    result = cli("query", "-", input=stdin)
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith(f"memcli: error: {message}"), result.stderr
    assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.stderr


def test_plain_text_on_stdin_is_still_the_query(cli, chats):
    hits = hits_of(cli("query", "-", "--user", "priya", "--top-k", "1", input=QUESTION + "\n"))
    assert hits[0]["text"] == ANSWER
    # Text that is not a JSON object (here an array) is a query like any other.
    assert cli("query", "-", "--user", "priya", input="[1, 2]").exit_code == 0


# -- the same through the installed entry point, in a process of its own ------------------------
_process = run_entry_point  # conftest


@pytest.fixture
def proc_env(tmp_path, db_path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("_MEMCLI")}
    env.update(MEMCLI_EMBEDDER="hash", MEMCLI_DB=str(db_path),
               PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    return env


@pytest.mark.long  # memcli as child processes
def test_a_process_widens_shows_the_scope_and_reads_the_request(cli, chats, proc_env):
    widened = _process(["query", "--session", "new", QUESTION, "-k", "3", "--json"], proc_env)
    assert widened.returncode == 0, widened.stderr
    hits = json.loads(widened.stdout)
    assert hits[0]["text"] == ANSWER and {h["scope"] for h in hits} == {"user"}
    table = _process(["query", "--session", "new", QUESTION, "-f", "text"], proc_env)
    assert "[scope: user, widened from session]" in table.stdout
    request = _process(["query", "-"], proc_env, stdin=json.dumps(REQUEST))
    assert request.returncode == 0, request.stderr
    assert json.loads(request.stdout) == hits_of(cli("query", "-", input=json.dumps(REQUEST)))
    bad = _process(["query", "-"], proc_env, stdin='{"query": "x", "colour": 1}')
    assert bad.returncode == 2
    assert bad.stderr.splitlines()[0].startswith("memcli: error: bad query request: colour")
