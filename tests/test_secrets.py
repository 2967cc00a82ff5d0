"""Planted secrets never reach the file: every write command x every secret kind redact.py knows.

Each example plants fresh random secrets (one needle per field the command takes) through the
real CLI, then reads the raw bytes of the database, its -wal and -shm files, first as the command
left them (a second connection stays open, so the WAL is not checkpointed away on close), then
after a TRUNCATE checkpoint. Artifacts live in the database file, so they are covered by the same
read. A bundle built with `--checkpoint` must not print a checkpoint's secret either.

Bounded for CI: one explicit example per secret kind, then a few random ones, no deadline.
The tally of needles planted vs found is printed at the end of the module (`pytest -s`).
"""

from __future__ import annotations

import itertools
import json
import string
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import apsw
import pytest
from backend_support import is_pg, stored_bytes
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

pytestmark = pytest.mark.backends  # SQLite and PostgreSQL (tests/backend_support.py)

TALLY: Counter[str] = Counter()
RUNS = itertools.count()

_ALNUM = string.ascii_letters + string.digits
_UPPER = string.ascii_uppercase + string.digits


# kind -> (alphabet, length, carrier(body) -> text holding it). The needle searched for is the
# body: the random part, which no detector leaves behind (labels, schemes and hosts may stay).
def _jwt(b: str) -> str:
    return f"eyJhbGciOiJIUzI1NiJ9.eyJ{b}.{b[::-1]}"


def _luhn_ok(number: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(number)):
        doubled = int(ch) * (1 + i % 2)
        total += doubled // 10 + doubled % 10
    return total % 10 == 0


def _card(raw: str) -> str:
    """A Luhn-valid 16-digit card number from 14 random digits, in groups of 4 split by spaces
    or by dashes (as the digits fall)."""
    digits = "4" + raw[:14]
    number = digits + next(d for d in "0123456789" if _luhn_ok(digits + d))
    return " -"[sum(map(int, raw)) % 2].join(number[i:i + 4] for i in range(0, 16, 4))


# kind -> the body made of the random part (default: the part + "7Q", see `_body`).
SHAPES: dict[str, Callable[[str], str]] = {"card_number": _card}

KINDS: dict[str, tuple[str, int, Callable[[str], str]]] = {
    "openai_key": (_ALNUM, 32, lambda b: f"sk-proj-{b}"),
    "anthropic_key": (_ALNUM, 32, lambda b: f"sk-ant-api03-{b}"),
    "github_token": (_ALNUM, 36, lambda b: f"ghp_{b}"),
    "github_pat": (_ALNUM, 60, lambda b: f"github_pat_{b}"),
    "slack_token": (_ALNUM, 24, lambda b: f"xoxp-{b}"),
    "google_api_key": (_ALNUM, 35, lambda b: f"AIza{b}"),
    "stripe_key": (_ALNUM, 24, lambda b: f"sk_live_{b}"),
    "aws_access_key_id": (_UPPER, 16, lambda b: f"AKIA{b}"),
    "aws_secret_access_key": (_ALNUM, 40, lambda b: f"aws_secret_access_key={b}"),
    "jwt": (_ALNUM, 24, _jwt),
    "bearer_token": (_ALNUM, 28, lambda b: f"curl -H 'Bearer {b}' https://api.example.com"),
    "authorization": (_ALNUM, 28, lambda b: f"Authorization: Basic {b}"),
    "url_password": (_ALNUM, 20, lambda b: f"postgres://admin:{b}@db.example.com/app"),
    "password": (_ALNUM, 20, lambda b: f"password={b}"),
    "api_key": (_ALNUM, 24, lambda b: f'api_key: "{b}"'),
    "token": (_ALNUM, 24, lambda b: f"token={b}"),
    "secret": (_ALNUM, 24, lambda b: f"client_secret = '{b}'"),
    "private_key": (
        _ALNUM,
        48,
        lambda b: f"-----BEGIN RSA PRIVATE KEY-----\n{b}\n-----END RSA PRIVATE KEY-----",
    ),
    "private": (_ALNUM, 24, lambda b: f"<private>{b}</private>"),
    "card_number": (string.digits, 16, lambda b: f"paid with card {b} (exp 05/27)"),
}


def _finish(kind: str, raw: str) -> str:
    # A digit and an upper-case letter are forced in, as real credentials have them; the random
    # part makes every needle unique in the file.
    return SHAPES[kind](raw) if kind in SHAPES else raw + "7Q"


def _body(kind: str) -> st.SearchStrategy[str]:
    alphabet, size, _ = KINDS[kind]
    return st.text(alphabet, min_size=size - 2, max_size=size - 2).map(
        lambda raw: _finish(kind, raw))


@st.composite
def planted(draw, fields: int) -> tuple[str, list[str], list[str]]:
    """(kind, carriers, needles): one fresh needle per field, all of one kind."""
    kind = draw(st.sampled_from(sorted(KINDS)))
    return _plant(kind, draw(st.lists(_body(kind), min_size=fields, max_size=fields, unique=True)))


def _plant(kind: str, bodies: list[str]) -> tuple[str, list[str], list[str]]:
    carrier = KINDS[kind][2]
    return kind, [carrier(b) for b in bodies], bodies


def _explicit(fields: int):
    """One explicit example per kind (hypothesis runs them first), so every kind is planted in
    every command however the random draws fall."""

    def deco(test):
        for n, kind in enumerate(sorted(KINDS)):
            alphabet, size, _ = KINDS[kind]
            bodies = [
                _finish(kind, "".join(alphabet[(n * 7 + i * 13 + j * 5) % len(alphabet)]
                                      for j in range(size - 2)))
                for i in range(fields)
            ]
            test = example(case=_plant(kind, bodies))(test)
        return test

    return deco


CASES = settings(
    max_examples=len(KINDS) + 6,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,  # one database per test, shared by its examples
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)


# -- the files -------------------------------------------------------------------------------
class Files:
    """The database's files, read as bytes, with a second connection holding the WAL open."""

    def __init__(self, db_path: Path) -> None:
        self.db_path = db_path
        self.conn = None if is_pg(db_path) else apsw.Connection(str(db_path))

    def blobs(self) -> dict[str, bytes]:
        if self.conn is None:  # PostgreSQL: every stored value (backend_support)
            return {"tables": stored_bytes(self.db_path)}
        out = {}
        for suffix in ("", "-wal", "-shm"):
            path = Path(f"{self.db_path}{suffix}")
            if path.exists():
                out[path.name] = path.read_bytes()
        return out

    def found(self, needles: list[str]) -> list[str]:
        """Needles present in any file, before and after a checkpoint of the WAL."""
        hits = set()
        # PostgreSQL has no WAL of ours to fold in: one read is all there is to see.
        stages = ("as left",) if self.conn is None else ("as left", "checkpointed")
        for stage in stages:
            if stage == "checkpointed" and self.conn is not None:
                self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            for name, data in self.blobs().items():
                hits.update(f"{n} in {name} ({stage})" for n in needles if n.encode() in data)
        return sorted(hits)

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


@dataclass
class Ran:
    exit_code: int
    stdout: str
    stderr: str


@pytest.fixture(scope="module")
def command():
    """The app's command, built once: Typer rebuilds it on every CliRunner.invoke (~0.3-1 s
    here), which would dominate a few hundred invocations."""
    from typer.main import get_command

    from memcli.cli.app import app

    return get_command(app)


@pytest.fixture
def cli(cli, command):
    """The `cli` fixture's environment (database, hash embedder), the same real CLI, faster."""
    runner = CliRunner()

    def run(*args: str, input: str | None = None) -> Ran:
        code = 0
        with runner.isolation(input=input) as (out, err, _):
            try:
                command.main(list(args), prog_name="memcli")
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
            return Ran(code, out.getvalue().decode(), err.getvalue().decode())

    return run


@pytest.fixture
def files(cli, db_path):
    # A write that plants nothing creates the database (read commands may refuse a missing one).
    setup = cli("checkpoint", "save", "--user", "setup", "--thread", "setup", "--data", "{}")
    assert setup.exit_code == 0, setup.stderr
    f = Files(db_path)
    yield f
    f.close()


def _check(files: Files, command: str, needles: list[str], *outputs: str) -> None:
    found = files.found(needles)
    found += [f"{n} in output" for n in needles for out in outputs if n in out]
    recovered = sum(any(where.startswith(n) for where in found) for n in needles)
    for scope in (command, "all"):
        TALLY[f"{scope}: planted"] += len(needles)
        TALLY[f"{scope}: found"] += recovered  # distinct needles, wherever they were
    assert not found, found


def _ok(result) -> dict:
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout) if result.stdout.strip().startswith(("{", "[")) else {}


@pytest.fixture(scope="module", autouse=True)
def _report():
    yield
    print("\nsecrets planted vs found:")
    for key in sorted(TALLY):
        print(f"  {key}: {TALLY[key]}")


# -- ingest ----------------------------------------------------------------------------------
INGEST_FIELDS = 8


def _ingest_record(carriers: list[str]) -> dict:
    c = carriers
    return {
        "session_id": "s1",
        "user_id": "u1",
        "content": {
            # A counter makes the text unique: redacted records that differ only in their
            # secrets are one event (same content hash), and would be skipped.
            "text": f"deploying with {c[0]} now (run {next(RUNS)})",
            c[1]: "a key that is itself a secret",
            "args": {"env": [{"value": c[2]}, c[3]], c[4]: {"deeper": True}},
        },
        "tags": ["deploy", c[5]],
        "refs": [c[6], {"url": c[7], "nested": {"k": [c[7] + " again"]}}],
    }


@_explicit(INGEST_FIELDS)
@given(case=planted(INGEST_FIELDS))
@CASES
def test_ingest_never_stores_a_secret_in_any_field(cli, files, case):
    kind, carriers, needles = case
    result = cli("ingest", "-", "--json", input=json.dumps(_ingest_record(carriers)))
    report = _ok(result)
    _check(files, "ingest", needles, result.stdout)
    assert report["created"] and report["redacted"], report


@_explicit(2)
@given(case=planted(2))
@CASES
def test_ingest_tool_output_artifact_never_holds_a_secret(cli, files, case):
    kind, carriers, needles = case
    big = "\n".join([carriers[0], f"run {next(RUNS)}", *(f"output line {i}" for i in range(6000)),
                     carriers[1]])
    record = {"kind": "tool_result", "content": {"output": big}, "session_id": "s2"}
    # --defer-embed: the write (and its redaction) is the same; encoding the 64 KB excerpt's
    # chunks would make this the slowest test by far, and vectors hold no text.
    report = _ok(cli("ingest", "-", "--json", "--defer-embed", input=json.dumps(record)))
    _check(files, "ingest artifact", needles)
    assert report["artifacts"], report


# -- remember and proposals ------------------------------------------------------------------
@_explicit(1)
@given(case=planted(1))
@CASES
def test_remember_never_stores_a_secret(cli, files, case):
    kind, carriers, needles = case
    out = _ok(cli("remember", f"the deploy credential is {carriers[0]}", "--user", "u1", "--json"))
    _check(files, "remember", needles)
    assert out["redacted"], out


@_explicit(3)
@given(case=planted(3))
@CASES
def test_remember_procedural_never_stores_a_secret(cli, files, case):
    kind, (title, step1, step2), needles = case
    out = _ok(cli("remember", "--procedural", "--title", f"Deploy with {title}",
                  "--step", step1, "--step", f"then run make with {step2}", "--json"))
    _check(files, "remember --procedural", needles)
    assert out["redacted"], out


@_explicit(1)
@given(case=planted(1))
@CASES
def test_a_consent_proposal_never_stores_a_secret(cli, files, case):
    kind, carriers, needles = case
    out = _ok(cli("remember", f"city: {carriers[0]}", "--user", "u1", "--field", "city", "--json"))
    _check(files, "proposal", needles)
    assert out["redacted"], out


# -- decisions and tasks ---------------------------------------------------------------------
def _decision_args(c: list[str]) -> list[str]:
    return ["--rationale", c[1], "--constraint", c[2], "--alternative", c[3],
            "--consequence", c[4], "--ref", c[5]]


@_explicit(6)
@given(case=planted(6))
@CASES
def test_decision_add_never_stores_a_secret(cli, files, case):
    kind, c, needles = case
    out = _ok(cli("decision", "add", f"Use {c[0]}", *_decision_args(c), "--json"))
    _check(files, "decision add", needles)
    assert out["redacted"], out


@pytest.fixture
def active(cli, files):
    """The decision (or task) id the next supersede (update) works on."""
    first = _ok(cli("decision", "add", "Use plain files", "--json"))
    task = _ok(cli("task", "add", "Write the deploy script", "--json"))
    return {"decision": first["id"], "task": task["id"]}


@_explicit(7)
@given(case=planted(7))
@CASES
def test_decision_supersede_never_stores_a_secret(cli, files, active, case):
    kind, c, needles = case
    out = _ok(cli("decision", "supersede", str(active["decision"]), f"Use {c[0]}",
                  *_decision_args(c), "--reason", f"rotated {c[6]}", "--json"))
    active["decision"] = out["id"]
    _check(files, "decision supersede", needles)
    assert out["redacted"], out


@_explicit(3)
@given(case=planted(3))
@CASES
def test_task_add_never_stores_a_secret(cli, files, case):
    kind, c, needles = case
    out = _ok(cli("task", "add", f"Rotate {c[0]}", "--details", c[1], "--ref", c[2], "--json"))
    _check(files, "task add", needles)
    assert out["redacted"], out


@_explicit(3)
@given(case=planted(3))
@CASES
def test_task_update_never_stores_a_secret(cli, files, active, case):
    kind, c, needles = case
    out = _ok(cli("task", "update", str(active["task"]), "--title", f"Rotate {c[0]} #{next(RUNS)}",
                  "--details", c[1], "--ref", c[2], "--json"))
    _check(files, "task update", needles)
    assert out["redacted"], out


# -- checkpoints and the bundle that prints them ---------------------------------------------
@_explicit(5)
@given(case=planted(5))
@CASES
def test_checkpoint_never_stores_or_prints_a_secret(cli, files, case):
    kind, c, needles = case
    state = {"plan": f"deploy with {c[0]}", c[1]: "state kept under a secret key",
             "env": [{"DEPLOY": c[2]}, {c[3]: {"note": c[4]}}], "step": 3}
    out = _ok(cli("checkpoint", "save", "--user", "u1", "--thread", "t1",
                  "--data", json.dumps(state), "--json"))
    loaded = cli("checkpoint", "load", "--user", "u1", "--thread", "t1", "--json")
    bundle = cli("acb", "build", "--user", "u1", "--session", "t1", "--checkpoint", "--json")
    assert bundle.exit_code == 0, bundle.stderr
    assert '"checkpoint"' in bundle.stdout  # the handoff does show the checkpoint
    _check(files, "checkpoint save + acb build", needles, loaded.stdout, bundle.stdout)
    assert out["redacted"], out


# -- what a model writes ---------------------------------------------------------------------
@pytest.fixture
def model_cli(cli, monkeypatch, tmp_path):
    """The CLI with the scripted model stub (tests/llmstub.py), sparse leg off for speed."""
    from llmstub import make_stub

    config = tmp_path / "config.yaml"
    config.write_text(
        "retrieval: {leg_weights: {lexical: 1, sparse: 0, dense: 1, entity: 0.5, trigram: 0.5}}\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("MEMCLI_CONFIG", str(config))
    with make_stub() as stub:
        monkeypatch.setenv("MEMCLI_LLM_BASE_URL", stub.base_url)
        monkeypatch.setenv("MEMCLI_LLM_MODEL", "stub-model")
        yield cli, stub


def test_text_a_model_writes_is_redacted_too(model_cli, files):
    """A model can reconstruct a secret (or be told one): consolidation's summary, facts, todos,
    entities and structured JSON go through the same path as everything else."""
    from lifecycle_support import conversation, extraction

    cli, stub = model_cli
    needles = [f"Zq{i}x7Hk2Lm9Pw4Rt6Yv8Nb3Cd5" for i in range(5)]
    records = conversation("s1", ["I deploy on Fridays.", "The staging box is slow."])
    _ok(cli("ingest", "-", "--json", input="\n".join(json.dumps(r) for r in records)))
    stub.enqueue_json(
        extraction(
            f"Priya deploys with sk-proj-{needles[0]} on Fridays.",
            facts=[f"Priya's deploy token is ghp_{needles[1]}{needles[1]}."],
            todos=[f"Rotate the key AIza{needles[2]}{needles[2][:9]} soon."],
            entities=[f"password={needles[3]}"],
            decisions=[f"Use postgres://deploy:{needles[4]}@db.example.com/prod for staging."],
        )
    )
    result = cli("consolidate", "--session", "s1", "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["sessions"] and report["sessions"][0]["added"], report
    _check(files, "consolidate (model text)", needles, result.stdout)
