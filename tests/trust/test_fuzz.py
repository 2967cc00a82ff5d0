"""Fuzz suite: generated ingest records, queries and flags, acb requests, config
and categories files through the real CLI. Every run: no traceback, exit code in
{0, 1, 2, 75}, errors as `memcli: error: ...` lines (usage errors too), and no
partial write (rejected records leave nothing; the good records of a batch are all stored).

Short by default (a few hundred cases, for CI); `MEMCLI_TRUST_FULL=1` runs >= 10,000 cases.
Every failing input found is kept in tests/trust/fuzz_corpus.json and replayed by
`test_corpus_case`.
"""

from __future__ import annotations

import base64
import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.fuzz import (
    BAD_BYTES,
    DEEP,
    HUGE_INT,
    check_ingest,
    check_output,
    counts,
    run_cli,
    run_process,
    to_bytes,
)

pytestmark = pytest.mark.trust

FULL = os.environ.get("MEMCLI_TRUST_FULL") == "1"
CORPUS = Path(__file__).with_name("fuzz_corpus.json")
# Cases per test: (short, full). Full totals 10,300.
CASES = {"ingest": (90, 4000), "query": (60, 2500), "acb": (50, 2000), "config": (25, 1000),
         "categories": (20, 800)}
# The sparse (SPLADE) leg is left out of the generated runs: loading it costs ~0.4 s a
# command, and its input is bounded text like the other legs' (tests/cli/test_badinput.py).
NO_SPARSE = "retrieval:\n  leg_weights: {lexical: 1.0, dense: 1.0, entity: 0.5, trigram: 0.5}\n"


def budget(name: str) -> settings:
    short, full = CASES[name]
    return settings(max_examples=full if FULL else short, deadline=None, derandomize=not FULL,
                    database=None, suppress_health_check=list(HealthCheck))


@pytest.fixture
def env(monkeypatch, tmp_path):
    """A memcli database with a few memories, the hash embedder, no SPLADE."""
    db = tmp_path / "memory.db"
    config = tmp_path / "config.yaml"
    config.write_text(NO_SPARSE)
    monkeypatch.setenv("MEMCLI_EMBEDDER", "hash")
    monkeypatch.setenv("MEMCLI_DB", str(db))
    monkeypatch.setenv("MEMCLI_CONFIG", str(config))
    seed = "\n".join(json.dumps({"event_id": f"seed{i}", "session_id": "s1", "user_id": "u1",
                                 "text": text}) for i, text in enumerate(
        ["kiwi pie for the picnic", "Priya moved to Lisbon", "deploy failed on 中文 server"]))
    assert run_cli(["ingest", "-"], seed.encode()).exit_code == 0
    return db


# -- generated values --------------------------------------------------------------------------
ODD_TEXT = st.sampled_from(["\ud800", "\udfff", "\udcff", "\x00", "\u202e", "😀", "é", "中文",
                            "\ufeff", "\\", '"', "\n", "a" * 300, BAD_BYTES, "NaN", "-", ""])
TEXT = st.one_of(st.text(max_size=30), st.lists(ODD_TEXT, max_size=4).map("".join),
                 st.text(st.characters(codec="utf-8"), max_size=10) | ODD_TEXT)
ODD_DATES = st.sampled_from([
    "0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00", "2025-02-30T00:00:00Z",
    "2025-01-01", "2025-01-01T10:00:00", "Z", "", "now", "2025-13-01T00:00:00Z",
    "0000-01-01T00:00:00Z", "10000-01-01T00:00:00Z", "2025-01-01T25:00:00Z",
    "2025-01-01T10:00:00+25:00", "1970-01-01T00:00:00.000000001Z"])
NUMBERS = st.one_of(st.integers(), st.integers(min_value=2**63 - 2, max_value=2**70),
                    st.floats(), st.sampled_from([HUGE_INT, 1e308, -0.0, 2**64]))
SPECIAL = st.one_of(ODD_DATES, NUMBERS, st.builds(DEEP.format,
                                                  st.sampled_from([70, 300, 600, 1200])))
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, TEXT, SPECIAL)
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(TEXT, inner, max_size=3), max_leaves=8)
FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "event_id": TEXT, "ts": ODD_DATES | TEXT, "tenant_id": TEXT, "user_id": TEXT,
    "agent_id": TEXT, "session_id": TEXT, "app_id": TEXT, "run_id": TEXT,
    "channel": st.sampled_from(["private", "public", "team", "agent", "x"]),
    "actor": st.fixed_dictionaries({}, optional={"type": TEXT, "id": TEXT, "x": JSON}),
    "kind": st.sampled_from(["message", "tool_call", "tool_result", "decision", "task_update",
                             "artifact", "nope"]),
    "sensitivity": st.sampled_from(["none", "low", "high", "secret", "x"]),
    "tags": st.lists(TEXT, max_size=3), "refs": st.lists(JSON, max_size=3),
    "content": st.dictionaries(st.sampled_from(["text", "output", "name", "args", "summary"])
                               | TEXT, JSON, max_size=3),
    "category": TEXT, "importance": NUMBERS, "pinned": JSON, "text": TEXT, "role": TEXT,
}
RECORD = st.one_of(
    st.fixed_dictionaries({}, optional={k: v | JSON for k, v in FIELDS.items()}),
    st.fixed_dictionaries({"text": TEXT}, optional={k: v for k, v in FIELDS.items()
                                                    if k != "text"}),
    JSON,
)


def _good() -> dict[str, Any]:
    mark = uuid.uuid4().hex
    return {"event_id": f"good-{mark}", "text": f"good record {mark}"}


def _batch(records: list[Any], layout: str, ascii_only: bool) -> bytes:
    if layout == "array":
        return to_bytes(json.dumps(records, ensure_ascii=ascii_only))
    if layout == "object" and len(records) == 1:
        return to_bytes(json.dumps(records[0], ensure_ascii=ascii_only))
    return b"\n".join(to_bytes(json.dumps(r, ensure_ascii=ascii_only)) for r in records) + b"\n"


@budget("ingest")
@given(bad=st.lists(RECORD, min_size=1, max_size=3), n_good=st.integers(0, 2),
       layout=st.sampled_from(["ndjson", "array", "object"]), ascii_only=st.booleans(),
       where=st.sampled_from(["stdin", "file"]), strict=st.booleans())
def test_ingest_records(env, tmp_path, bad, n_good, layout, ascii_only, where, strict):
    good = [_good() for _ in range(n_good)]
    records = [*good, *bad]
    if layout == "array" and "DEEP1200" in json.dumps(records):
        layout = "ndjson"  # deeper than Python's json can read as one document
    body = _batch(records, layout, ascii_only)
    args = ["ingest", *(["--strict"] if strict else [])]
    before = counts(env)
    if where == "file":
        path = tmp_path / "batch.json"
        path.write_bytes(body)
        result = run_cli([*args, str(path)])
    else:
        result = run_cli([*args, "-"], body)
    report = check_ingest(result.exit_code, result.stdout, result.stderr, env, before,
                          [] if strict else [g["event_id"] for g in good], what=repr(body[:300]))
    if strict and report is not None and report["rejected"]:
        assert counts(env) == before  # all or nothing


QUERY_FLAGS: list[tuple[str, st.SearchStrategy[Any]]] = [
    ("--session", TEXT), ("--user", TEXT), ("--tenant", TEXT), ("--agent", TEXT),
    ("--agent-id", TEXT), ("--run", TEXT), ("--actor", TEXT), ("--role", TEXT),
    ("--app", TEXT), ("--category", TEXT), ("--kind", TEXT), ("--channel", TEXT),
    ("--sensitivity", TEXT), ("--importance-min", NUMBERS), ("--importance-max", NUMBERS),
    ("--updated-after", ODD_DATES | TEXT), ("--updated-before", ODD_DATES | TEXT),
    ("--top-k", st.integers(-5, 2000)), ("--threshold", NUMBERS), ("--return", TEXT),
    ("--budget-tokens", st.integers(-5, 10**6)), ("--legs", TEXT | st.sampled_from(
        ["lexical", "dense,entity", "trigram", "lexical,sparse"])), ("--no-widen", None),
    ("--explain", None), ("--pinned", None), ("--unpinned", None),
    ("--format", st.sampled_from(["json", "jsonl", "text", "xml"])),
]


def _flags(draw: Any, table: list[tuple[str, Any]]) -> list[str]:
    out: list[str] = []
    for flag, values in draw(st.lists(st.sampled_from(table), max_size=4)):
        out.append(flag)
        if values is not None:
            value = draw(values)
            out.append(str(value).replace(BAD_BYTES, "\udcff").replace(HUGE_INT, "9" * 5000))
    return out


@budget("query")
@given(data=st.data(), text=TEXT | st.sampled_from(["kiwi", "Lisbon", "中文", "-", "NEAR(",
                                                    '"', "*", "kiwi " * 3000]),
       stdin=st.none() | TEXT)
def test_query(env, data, text, stdin):
    flags = _flags(data.draw, QUERY_FLAGS)
    before = counts(env)
    text = text.replace(BAD_BYTES, "\udcff")  # argv bytes that are not UTF-8
    payload = to_bytes(stdin) if stdin is not None and text == "-" else None
    result = run_cli(["query", text, *flags], payload)
    check_output(result.exit_code, result.stderr, what=repr(["query", text[:80], *flags]))
    assert result.exit_code in (0, 2), result.stderr
    assert counts(env) == before
    if result.exit_code == 0 and "--format" not in flags:
        assert isinstance(json.loads(result.stdout), list)


ACB_KEYS = st.sampled_from(["query", "query_text", "tenant_id", "user_id", "session_id",
                            "agent_id", "agent", "channel", "intent", "max_tokens", "caps",
                            "categories", "app_id", "since", "track", "handoff",
                            "include_checkpoint", "as_of", "tenant", "user", "session", "app",
                            "bogus"])
ACB_VALUES = st.one_of(JSON, st.integers(-10, 10**5), st.sampled_from(
    ["private", "team", "public", "agent", "kiwi", True]), st.dictionaries(
    st.sampled_from(["identity", "rules", "recent_window", "nope"]), st.integers(-5, 10**6)))


@budget("acb")
@given(request=st.dictionaries(ACB_KEYS, ACB_VALUES, max_size=5) | JSON,
       ascii_only=st.booleans(), flags=st.lists(st.sampled_from(
           [["--max-tokens", "0"], ["--max-tokens", "50"], ["--cap", "rules=5"],
            ["--cap", "x"], ["--since", "1"], ["--checkpoint"], ["--no-track"],
            ["--handoff", "notes"], ["-q", "kiwi"], ["--format", "markdown"]]), max_size=2))
def test_acb_build(env, request, ascii_only, flags):
    body = to_bytes(json.dumps(request, ensure_ascii=ascii_only))
    before = counts(env)
    result = run_cli(["acb", "build", "-", *[f for pair in flags for f in pair]], body)
    check_output(result.exit_code, result.stderr, what=repr(body[:300]))
    assert result.exit_code in (0, 2), result.stderr
    assert counts(env) == before


SECTIONS = st.sampled_from(["embedder", "llm", "retrieval", "acb", "lifecycle", "db",
                            "categories_file", "encoding", "context_dir", "bogus"])
SETTING_KEYS = st.sampled_from(["provider", "model", "dimension", "leg_weights", "fusion",
                                "rrf_k", "sections", "reserve", "alpha", "candidates_per_leg",
                                "timeout", "max_tokens", "cap", "x"])
YAML_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-10, 10**4), st.floats(), st.text(max_size=8),
              st.sampled_from(["hash", "rrf", "zscore", "nope", "/nonexistent/dir"])),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(SETTING_KEYS | st.sampled_from(
        ["lexical", "dense", "sparse", "rules", "identity", "cap", "priority"]), inner,
        max_size=3), max_leaves=8)


def _yaml(value: Any) -> str:
    return yaml.safe_dump(value, allow_unicode=True)


# Keys whose generated values would reach outside the test: another database file, an
# embedder over the network, a tokenizer download (tiktoken fetches unknown encodings).
OUTSIDE = ("db", "embedder", "encoding")


@budget("config")
@given(config=st.dictionaries(SECTIONS, YAML_VALUES, max_size=4).map(_yaml)
       | st.text(max_size=60) | st.sampled_from(["[1, 2]", "a: [", "\t- x", "!!python/x 1"]),
       command=st.sampled_from([["query", "kiwi"], ["ingest", "--text", "kiwi again"],
                                ["acb", "build", "-q", "kiwi"], ["stats"]]))
def test_config_files(env, tmp_path, config, command):
    try:
        parsed = yaml.safe_load(config)
    except yaml.YAMLError:
        parsed = None
    if isinstance(parsed, dict) and any(k in parsed for k in OUTSIDE):
        config = _yaml({k: v for k, v in parsed.items() if k not in OUTSIDE})
    path = tmp_path / "fuzz-config.yaml"
    path.write_text(config, encoding="utf-8", errors="surrogatepass")
    before = counts(env)
    result = run_cli(command, env={"MEMCLI_CONFIG": str(path)})
    check_output(result.exit_code, result.stderr, what=f"{command} with config {config!r}")
    assert result.exit_code in (0, 2), result.stderr
    if command[0] != "ingest":
        assert counts(env) == before


CATEGORY_FILES = st.one_of(
    st.fixed_dictionaries({}, optional={
        "categories": st.lists(TEXT | st.fixed_dictionaries({"name": JSON}) | JSON, max_size=4),
        "allowlists": st.dictionaries(TEXT, st.lists(TEXT, max_size=3) | JSON, max_size=3)
        | JSON,
        "restricted": st.lists(TEXT, max_size=3) | JSON,
    }).map(lambda d: yaml.safe_dump(json.loads(json.dumps(d, default=str)),
                                    allow_unicode=True)),
    st.text(max_size=60), st.sampled_from(["[", "categories: 5", "allowlists: [1]"]))


@budget("categories")
@given(text=CATEGORY_FILES, command=st.sampled_from([
    ["query", "kiwi", "--agent", "a1"], ["query", "kiwi", "--category", "event"],
    ["ingest", "--text", "more kiwi", "--category", "fact"],
    ["acb", "build", "--agent", "a1", "-q", "kiwi"]]))
def test_categories_files(env, tmp_path, text, command):
    path = tmp_path / "categories.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    result = run_cli(command, env={"MEMCLI_CATEGORIES": str(path)})
    check_output(result.exit_code, result.stderr, what=f"{command} with categories {text!r}")
    assert result.exit_code in (0, 2), result.stderr


# -- the real process: byte-level stdin ---------------------------------------------------------
PROCESS_CASES = [
    (["ingest", "-"], b'{"event_id":"p1","text":"good"}\n{"text":"b\xff"}\n', 2),
    (["ingest", "-"], b'{"event_id":"p2","text":"good"}\n{"text":"b","event_id":0}\n', 2),
    (["ingest", "-"], b'{"event_id":"p3","text":"good"}\n{"text":"' + b"\xc3(" * 10 + b'"}',
     2),
    (["query", "-"], b"kiwi \xff\xfe", 2),
    (["query", "kiwi", "--updated-after", "0001-01-01T00:00:00+01:00"], None, 2),
    (["acb", "build", "-"], b'{"query": "' + b"\xff" + b'"}', 2),
    (["acb", "build", "-"], b'{"query": ' + b"[" * 5000 + b"]" * 5000 + b"}", 2),
    (["query", "-"], b"kiwi " * 60_000, 0),
]


@pytest.mark.parametrize("args,stdin,code", PROCESS_CASES,
                         ids=[f"{a[0]}-{i}" for i, (a, _, _) in enumerate(PROCESS_CASES)])
def test_real_process(env, args, stdin, code):
    config = {"MEMCLI_EMBEDDER": "hash", "MEMCLI_DB": str(env),
              "MEMCLI_CONFIG": os.environ["MEMCLI_CONFIG"]}
    before = counts(env)
    done = run_process(args, stdin, config)
    stderr = done.stderr.decode("utf-8", errors="replace")
    check_output(done.returncode, stderr, what=repr(args))
    assert done.returncode == code, stderr
    if args[0] == "ingest":
        assert counts(env)[0] == before[0] + 1  # the good record, not the bad one
    else:
        assert counts(env) == before


# -- corpus: every failing input found so far, replayed ------------------------------------------
def _corpus() -> list[dict[str, Any]]:
    return json.loads(CORPUS.read_text(encoding="utf-8"))


@pytest.mark.parametrize("case", _corpus(), ids=lambda c: c["id"])
def test_corpus_case(env, tmp_path, case):
    stdin = base64.b64decode(case["stdin_b64"]) if "stdin_b64" in case else None
    extra = {}
    for name, text in case.get("files", {}).items():
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        extra[case["file_env"][name]] = str(path)
    args = [a.replace("\\udcff", "\udcff") for a in case["args"]]
    before = counts(env)
    result = run_cli(args, stdin, env=extra or None)
    check_output(result.exit_code, result.stderr, what=case["id"])
    assert result.exit_code == case["exit"], result.stderr
    if args[0] == "ingest":
        check_ingest(result.exit_code, result.stdout, result.stderr, env, before,
                     case.get("good", []), what=case["id"])
    else:
        assert counts(env) == before
