"""Planted secrets never reach the file: every write command x every secret kind redact.py knows.

Each example plants fresh random secrets (one needle per field the command takes) through the
real CLI, then reads the raw bytes of the database, its -wal and -shm files, first as the command
left them (a second connection stays open, so the WAL is not checkpointed away on close), then
after a TRUNCATE checkpoint. Artifacts live in the database file, so they are covered by the same
read. A bundle built with `--checkpoint` must not print a checkpoint's secret either.

Each example plants every secret kind at once, in one invocation where the command's field
lengths allow (one record per kind in one ingest; a fact's 280 characters take a few), and reads
the files once: an explicit example, then a few random ones, no deadline. Every kind must show in
the command's redaction report, so each is still seen detected on its own.
The tally of needles planted vs found is printed at the end of the module (`pytest -s`).
"""

from __future__ import annotations

import itertools
import json
import string
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import apsw
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from stdnum import iban as stdnum_iban

from tests.support.backend import is_pg, stored_bytes

# SQLite and PostgreSQL (tests/support/backend.py); a trust suite: random secrets through every
# write command, seconds an example
pytestmark = [pytest.mark.backends, pytest.mark.trust]

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


def _iban(raw: str) -> str:
    """A valid British IBAN (mod-97) from 14 random digits, in groups of 4."""
    bban = "WEST" + raw[:14]
    number = "GB" + stdnum_iban.calc_check_digits("GB00" + bban) + bban
    return " ".join(number[i:i + 4] for i in range(0, len(number), 4))


# kind -> the body made of the random part (default: the part + "7Q", see `_body`).
# A gitleaks rule drops a value whose entropy is at or under its floor (3 bits for `glpat-`),
# as a placeholder: the random part is mixed with varied characters, so that even the draw
# hypothesis shrinks to (all zeros) is a real-looking token. A PIN gets fixed digits around its
# random ones, so that it is not a run of zeros, which a database file holds anyway.
SHAPES: dict[str, Callable[[str], str]] = {
    "card_number": _card, "iban": _iban,
    "gitlab_pat": lambda raw: raw[:6] + "Zq8Xk3Lp7WmN2b",
    "pin": lambda raw: "9" + raw[:5] + "37",
}

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
    # gitleaks' rule set, a sentence, a number proven by its check digits
    "gitlab_pat": (_ALNUM, 20, lambda b: f"CI pushes with glpat-{b} now."),
    "wifi_password": (_ALNUM, 14, lambda b: f"the wifi password is {b}"),
    "pin": (string.digits, 10, lambda b: f"my PIN is {b}"),  # 8 digits
    "iban": (string.digits, 16, lambda b: f"my IBAN is {b}, thanks"),
}


def _finish(kind: str, raw: str) -> str:
    # A digit and an upper-case letter are forced in, as real credentials have them; the random
    # part makes every needle unique in the file.
    return SHAPES[kind](raw) if kind in SHAPES else raw + "7Q"


def _body(kind: str) -> st.SearchStrategy[str]:
    alphabet, size, _ = KINDS[kind]
    return st.text(alphabet, min_size=size - 2, max_size=size - 2).map(
        lambda raw: _finish(kind, raw))


@dataclass
class Planted:
    """Every secret kind at once: kind -> one carrier (the text holding it) per field the
    command takes, and the needles (bodies) searched for in the files afterwards."""

    carriers: dict[str, list[str]]
    bodies: dict[str, list[str]]

    @property
    def needles(self) -> list[str]:
        return [b for bodies in self.bodies.values() for b in bodies]

    def field(self, i: int, line: Callable[[str], str] = str) -> str:
        """Field `i` of the command: every kind's carrier for it, one line each."""
        return "\n".join(line(c[i]) for c in self.carriers.values())

    def parts(self, limit: int, line: Callable[[str], str] = str) -> list[Planted]:
        """The kinds in groups whose fields stay within `limit` characters, for commands that
        cap a field's length (a fact at 280, a step at 300): one invocation per group."""
        groups: list[dict[str, list[str]]] = [{}]
        for kind, carriers in self.carriers.items():
            trial = {**groups[-1], kind: carriers}
            if groups[-1] and max(len("\n".join(line(c[i]) for c in trial.values()))
                                  for i in range(len(carriers))) > limit:
                groups.append({kind: carriers})
            else:
                groups[-1] = trial
        return [Planted(g, {kind: self.bodies[kind] for kind in g}) for g in groups]


def _plant(bodies: dict[str, list[str]]) -> Planted:
    return Planted({kind: [KINDS[kind][2](b) for b in bodies[kind]] for kind in sorted(KINDS)},
                   {kind: bodies[kind] for kind in sorted(KINDS)})


@st.composite
def planted(draw, fields: int) -> Planted:
    """Fresh random needles of every kind, one per field, unique within a kind."""
    return _plant({kind: draw(st.lists(_body(kind), min_size=fields, max_size=fields,
                                       unique=True)) for kind in sorted(KINDS)})


def _explicit(fields: int):
    """One explicit example (hypothesis runs it first) planting every kind with fixed needles,
    so every kind goes through every command however the random draws fall."""
    bodies = {}
    for n, kind in enumerate(sorted(KINDS)):
        alphabet, size, _ = KINDS[kind]
        bodies[kind] = [
            _finish(kind, "".join(alphabet[(n * 7 + i * 13 + j * 5) % len(alphabet)]
                                  for j in range(size - 2)))
            for i in range(fields)
        ]
    return example(case=_plant(bodies))


# Each example writes every kind through the command in one invocation (one process's work),
# and then reads the files once: the explicit example, then a few random ones.
CASES = settings(
    max_examples=4,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,  # one database per test, shared by its examples
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,  # every kind, in every field, in each example
    ],
)


# -- the files -------------------------------------------------------------------------------
class Files:
    """The database's files, read as bytes, with a second connection holding the WAL open."""

    def __init__(self, db_path: Path) -> None:
        self.db_path = db_path
        self.conn = None if is_pg(db_path) else apsw.Connection(str(db_path))

    def blobs(self) -> dict[str, bytes]:
        if self.conn is None:  # PostgreSQL: every stored value (tests.support.backend)
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


def _kinds_reported(redacted: list) -> set[str]:
    """The kinds a report's `redacted` names: a list of kinds, or (ingest) one entry per event
    with its `kinds`."""
    out: set[str] = set()
    for entry in redacted:
        out.update(entry["kinds"] if isinstance(entry, dict) else [entry])
    return out


# The kind a report names for a planted kind, where redact.py names it otherwise.
REPORTED_AS = {"github_pat": "github_token", "wifi_password": "password"}


def _every_kind_reported(redacted: list) -> None:
    """Each planted kind was detected as such: one invocation plants them all, so a report
    that is merely non-empty would not say that each kind was found."""
    missing = sorted({REPORTED_AS.get(k, k) for k in KINDS} - _kinds_reported(redacted))
    assert not missing, (missing, redacted)


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
    # One record per kind, all in one ingest: each record is what a lone record would be.
    records = [_ingest_record(carriers) for carriers in case.carriers.values()]
    result = cli("ingest", "-", "--json", input="\n".join(json.dumps(r) for r in records))
    report = _ok(result)
    _check(files, "ingest", case.needles, result.stdout)
    assert len(report["created"]) == len(KINDS), report
    assert len(report["redacted"]) == len(KINDS), report  # every record reports its redaction
    _every_kind_reported(report["redacted"])


@_explicit(2)
@given(case=planted(2))
@CASES
def test_ingest_tool_output_artifact_never_holds_a_secret(cli, files, case):
    # Every kind in the output's first lines (the stored excerpt) and in its last ones (only
    # in the artifact, past the 64 KB excerpt).
    big = "\n".join([case.field(0), f"run {next(RUNS)}",
                     *(f"output line {i}" for i in range(6000)), case.field(1)])
    record = {"kind": "tool_result", "content": {"output": big}, "session_id": "s2"}
    # --defer-embed: the write (and its redaction) is the same; encoding the 64 KB excerpt's
    # chunks would make this the slowest test by far, and vectors hold no text.
    report = _ok(cli("ingest", "-", "--json", "--defer-embed", input=json.dumps(record)))
    _check(files, "ingest artifact", case.needles)
    assert report["artifacts"], report
    _every_kind_reported(report["redacted"])


# -- remember and proposals ------------------------------------------------------------------
FACT_LIMIT, STEP_LIMIT = 280, 300  # a fact's and a procedure step's most characters
@_explicit(1)
@given(case=planted(1))
@CASES
def test_remember_never_stores_a_secret(cli, files, case):
    line = "the deploy credential is {}".format
    reported = []
    for part in case.parts(FACT_LIMIT, line):
        reported += _ok(cli("remember", part.field(0, line), "--user", "u1", "--json"))["redacted"]
    _check(files, "remember", case.needles)
    _every_kind_reported(reported)


@_explicit(3)
@given(case=planted(3))
@CASES
def test_remember_procedural_never_stores_a_secret(cli, files, case):
    step = "then run make with {}".format
    reported = []
    for part in case.parts(STEP_LIMIT, step):
        reported += _ok(cli("remember", "--procedural",
                            "--title", part.field(0, "Deploy with {}".format),
                            "--step", part.field(1),
                            "--step", part.field(2, step), "--json"))["redacted"]
    _check(files, "remember --procedural", case.needles)
    _every_kind_reported(reported)


@_explicit(1)
@given(case=planted(1))
@CASES
def test_a_consent_proposal_never_stores_a_secret(cli, files, case):
    line = "city: {}".format
    reported = []
    for part in case.parts(FACT_LIMIT, line):
        reported += _ok(cli("remember", part.field(0, line), "--user", "u1", "--field", "city",
                            "--json"))["redacted"]
    _check(files, "proposal", case.needles)
    _every_kind_reported(reported)


# -- decisions and tasks ---------------------------------------------------------------------
def _decision_args(case: Planted) -> list[str]:
    return ["--rationale", case.field(1), "--constraint", case.field(2),
            "--alternative", case.field(3), "--consequence", case.field(4),
            "--ref", case.field(5)]


@_explicit(6)
@given(case=planted(6))
@CASES
def test_decision_add_never_stores_a_secret(cli, files, case):
    out = _ok(cli("decision", "add", case.field(0, lambda c: f"Use {c}"), *_decision_args(case),
                  "--json"))
    _check(files, "decision add", case.needles)
    _every_kind_reported(out["redacted"])


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
    out = _ok(cli("decision", "supersede", str(active["decision"]),
                  case.field(0, lambda c: f"Use {c}"), *_decision_args(case),
                  "--reason", case.field(6, lambda c: f"rotated {c}"), "--json"))
    active["decision"] = out["id"]
    _check(files, "decision supersede", case.needles)
    _every_kind_reported(out["redacted"])


@_explicit(3)
@given(case=planted(3))
@CASES
def test_task_add_never_stores_a_secret(cli, files, case):
    out = _ok(cli("task", "add", case.field(0, lambda c: f"Rotate {c}"),
                  "--details", case.field(1), "--ref", case.field(2), "--json"))
    _check(files, "task add", case.needles)
    _every_kind_reported(out["redacted"])


@_explicit(3)
@given(case=planted(3))
@CASES
def test_task_update_never_stores_a_secret(cli, files, active, case):
    title = case.field(0, lambda c: f"Rotate {c}") + f" #{next(RUNS)}"
    out = _ok(cli("task", "update", str(active["task"]), "--title", title,
                  "--details", case.field(1), "--ref", case.field(2), "--json"))
    _check(files, "task update", case.needles)
    _every_kind_reported(out["redacted"])


# -- checkpoints and the bundle that prints them ---------------------------------------------
@_explicit(5)
@given(case=planted(5))
@CASES
def test_checkpoint_never_stores_or_prints_a_secret(cli, files, case):
    c = list(case.carriers.values())
    # Every kind in every place a state holds text: values, keys, nested lists and objects.
    state = {"plan": case.field(0, lambda s: f"deploy with {s}"),
             **{k[1]: "state kept under a secret key" for k in c},
             "env": [{"DEPLOY": case.field(2)}, *({k[3]: {"note": k[4]}} for k in c)],
             "step": 3}
    out = _ok(cli("checkpoint", "save", "--user", "u1", "--thread", "t1",
                  "--data", json.dumps(state), "--json"))
    loaded = cli("checkpoint", "load", "--user", "u1", "--thread", "t1", "--json")
    bundle = cli("acb", "build", "--user", "u1", "--session", "t1", "--checkpoint", "--json")
    assert bundle.exit_code == 0, bundle.stderr
    assert '"checkpoint"' in bundle.stdout  # the handoff does show the checkpoint
    _check(files, "checkpoint save + acb build", case.needles, loaded.stdout, bundle.stdout)
    _every_kind_reported(out["redacted"])


# -- what a model writes ---------------------------------------------------------------------
@pytest.fixture
def model_cli(cli, monkeypatch, tmp_path):
    """The CLI with the scripted model stub (tests/support/llmstub.py), sparse leg off for speed."""
    from tests.support.llmstub import make_stub

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
    from tests.support.lifecycle import conversation, extraction

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
