"""The credential corpus (tests/support/secrets_corpus.py, 79 kinds) through every write entry:
not one raw byte of a planted value in the database, its WAL, an export, a log or an answer.

The entries: the CLI in-process (`ingest`, `remember`) and forwarded through a running daemon,
the importers (`import --from claude`, `chatgpt`, `mem0`), HTTP (`POST /api/v1/events`,
`/api/v1/memories`, `/api/v1/decisions`, `/api/v1/tasks`) and MCP (`memcli mcp`'s
`memory_record_event`, `memory_remember`, `memory_record_decision`, `memory_record_task`,
`memory_update_task`, bridged to the daemon); in-process also `decision add`, `task add` and
`task update`, `checkpoint save` (and the `checkpoint load` and `acb build` that print it),
`correct` with its `--reason`, consent proposals (`remember --field`) and events whose text is
in fields other than `text` (a decision's rationale, a task update's title, a tool call's
arguments, a tool result's output). Each entry gets its own home folder and database, and
afterwards every file under that home (database, -wal, -shm, `export -o` file, logs) and every
output is searched for each value's random parts. The fast tier runs one representative kind
of each family through `ingest`, `remember` and the importers in-process; the `trust` tier runs
the whole corpus through all of them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest
from mcp import Client

from memcli.policy.secrets import redact
from tests.support.daemon import Daemon, last_route, run_client, stop, wait_for_socket
from tests.support.mcp import payload, stdio_params
from tests.support.secrets_corpus import Planted, corpus
from tests.support.trust import memcli_env

# One kind of each family: gitleaks' rules, memcli's own prefixes, labelled values, sentences,
# a repeated label, check-digit numbers, `<private>`.
SAMPLE = ("gitlab_pat", "huggingface_token", "slack_webhook", "azure_storage_key",
          "google_oauth_secret", "aws_secret_bare", "wifi_password", "repeated_label", "pin",
          "iban", "us_ssn", "card_number", "private_tag", "telegram_bot_token")
FACT_LIMIT = 160  # a remembered fact holds 280 characters after redaction (markers run longer)


def planted(kinds: tuple[str, ...] | None = None, seed: int = 36) -> list[Planted]:
    return [p for p in corpus(seed) if kinds is None or p.kind in kinds]


def facts(items: list[Planted]) -> list[str]:
    """The carriers packed into facts of at most FACT_LIMIT characters, one per line (a
    longer carrier stands alone)."""
    out: list[str] = []
    for p in items:
        if out and len(out[-1]) + 1 + len(p.text) <= FACT_LIMIT:
            out[-1] += "\n" + p.text
        else:
            out.append(p.text)
    assert all(len(f) <= 280 for f in out)
    return out


def records(items: list[Planted], tag: str) -> list[dict]:
    return [{"session_id": f"s-{tag}", "user_id": "u1", "event_id": f"{tag}-{n}",
             "content": {"text": p.text}} for n, p in enumerate(items)]


def leaks(home: Path, items: list[Planted], *outputs: str | bytes) -> list[str]:
    """Every needle found in a file under `home` or in an output, as "kind in where"."""
    blobs = {str(f.relative_to(home)): f.read_bytes() for f in home.rglob("*") if f.is_file()}
    blobs.update({f"output {n}": o if isinstance(o, bytes) else o.encode()
                  for n, o in enumerate(outputs)})
    return sorted({f"{p.kind} in {where}" for p in items for needle in p.needles
                   for where, data in blobs.items() if needle.encode() in data})


def memcli(env: dict[str, str], *args: str, stdin: str = "") -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "memcli", *args], input=stdin, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done


# -- the importers' files ----------------------------------------------------------------------
def claude_file(items: list[Planted]) -> list[dict]:
    return [{"uuid": "conv-secrets", "name": "keys", "created_at": "2024-03-01T09:00:00Z",
             "chat_messages": [
                 {"uuid": f"m{n}", "sender": "human", "text": p.text,
                  "content": [{"type": "text", "text": p.text}],
                  "created_at": f"2024-03-01T09:{n // 60:02d}:{n % 60:02d}Z"}
                 for n, p in enumerate(items)]}]


def chatgpt_file(items: list[Planted]) -> list[dict]:
    ids = [f"n{n}" for n in range(len(items))]
    mapping = {"root": {"id": "root", "parent": None, "children": ids[:1], "message": None}}
    for n, p in enumerate(items):
        mapping[ids[n]] = {
            "id": ids[n], "parent": ids[n - 1] if n else "root", "children": ids[n + 1:n + 2],
            "message": {"id": ids[n], "author": {"role": "user"}, "create_time": 1.7e9 + n,
                        "content": {"content_type": "text", "parts": [p.text]}}}
    return [{"title": "keys", "create_time": 1.7e9, "conversation_id": "conv-gpt-secrets",
             "mapping": mapping, "current_node": ids[-1]}]


def mem0_file(items: list[Planted]) -> dict:
    return {"results": [{"id": f"mem-{n}", "memory": p.text, "user_id": "u1",
                         "metadata": {"note": p.text}, "created_at": "2024-03-01T09:00:00Z"}
                        for n, p in enumerate(items)]}


IMPORTERS = {"claude": claude_file, "chatgpt": chatgpt_file, "mem0": mem0_file}


# -- fast tier: a sample of each family, in-process ------------------------------------------
def test_the_corpus_is_caught_by_redaction_itself():
    """Every kind of the corpus, over many draws, loses all of its random parts."""
    missed = sorted({p.kind for seed in range(50) for p in corpus(seed)
                     if any(n in redact(p.text).text for n in p.needles)})
    assert not missed
    assert len({p.kind for p in corpus(0)}) >= 60


@pytest.mark.usefixtures("fast_cli")
def test_a_sample_of_every_family_through_the_in_process_entries(cli, db_path, tmp_path):
    if not isinstance(db_path, Path):
        pytest.skip("reads the SQLite files")
    items = planted(SAMPLE)
    outputs = [cli("ingest", "-", "--json",
                   input="\n".join(json.dumps(r) for r in records(items, "ing"))).stdout]
    for fact in facts(items):
        outputs.append(cli("remember", fact, "--user-id", "u1", "--json").stdout)
    for fmt, make in IMPORTERS.items():
        path = tmp_path / f"{fmt}.json"
        path.write_text(json.dumps(make(items)))
        result = cli("import", "--from", fmt, str(path), "--json")
        assert result.exit_code == 0, result.stderr
        outputs.append(result.stdout + result.stderr)
        path.unlink()  # the planted file itself is not what memcli keeps
    export = cli("export", "-o", str(tmp_path / "export.jsonl"))
    assert export.exit_code == 0, export.stderr
    assert not leaks(tmp_path, items, *outputs)
    stored = (tmp_path / "export.jsonl").read_text()
    assert "[REDACTED:" in stored


# -- trust tier: the whole corpus through the other in-process writes -------------------------
def _decisions(cli, items: list[Planted]) -> list:
    return [cli("decision", "add", f"Use {fact}", "--rationale", fact, "--constraint", fact,
                "--alternative", fact, "--consequence", fact, "--ref", fact, "--json")
            for fact in facts(items)]


def _tasks(cli, items: list[Planted]) -> list:
    out = [cli("task", "add", f"Rotate {fact}", "--details", fact, "--ref", fact, "--json")
           for fact in facts(items)]
    task = json.loads(out[0].stdout)["id"]
    out += [cli("task", "update", str(task), "--title", f"Rotate again {fact}", "--details", fact,
                "--ref", fact, "--json") for fact in facts(items)]
    return out


def _checkpoint(cli, items: list[Planted]) -> list:
    # Every carrier as a value, a key, and deep in a list of objects.
    state = {"notes": [p.text for p in items], **{p.text: "kept under it" for p in items},
             "env": [{"DEPLOY": p.text} for p in items], "step": 3}
    return [cli("checkpoint", "save", "--user", "u1", "--thread", "t1",
                "--data", json.dumps(state), "--json"),
            cli("checkpoint", "load", "--user", "u1", "--thread", "t1", "--json"),
            cli("acb", "build", "--user", "u1", "--session", "t1", "--checkpoint", "--json")]


def _corrections(cli, items: list[Planted]) -> list:
    out = [cli("remember", "the deploy credential is in the vault", "--user", "u1", "--json")]
    for fact in facts(items):  # each correction replaces the one before
        previous = json.loads(out[-1].stdout)["id"]
        out.append(cli("correct", str(previous), fact, "--reason", f"rotated {fact}", "--json"))
    return out


def _proposals(cli, items: list[Planted]) -> list:
    out = [cli("remember", "city: Lisbon", "--user", "u1", "--field", "city", "--json")]
    return out + [cli("remember", f"city: {fact}", "--user", "u1", "--field", "city", "--json")
                  for fact in facts(items)]


def _event_kinds(cli, items: list[Planted]) -> list:
    """Events whose text is in fields other than `text`: a decision's, a task update's, a tool
    call's arguments, a tool result's output."""
    shapes = [("decision", lambda t: {"decision": f"Use {t}", "rationale": t}),
              ("task_update", lambda t: {"title": t, "status": "open", "details": t}),
              ("tool_call", lambda t: {"tool": "shell", "args": {"cmd": t, "env": [t]}}),
              ("tool_result", lambda t: {"tool": "shell", "output": t})]
    lines = [json.dumps({"session_id": "s-kinds", "user_id": "u1", "kind": kind,
                         "event_id": f"{kind}-{n}", "content": make(p.text)})
             for kind, make in shapes for n, p in enumerate(items)]
    return [cli("ingest", "-", "--json", input="\n".join(lines))]


IN_PROCESS = {"decision add": _decisions, "task add + update": _tasks,
              "checkpoint save": _checkpoint, "correct + reason": _corrections,
              "remember --field": _proposals, "ingest of other kinds": _event_kinds}


@pytest.mark.trust
@pytest.mark.usefixtures("fast_cli")
@pytest.mark.parametrize("entry", sorted(IN_PROCESS))
def test_the_corpus_through_the_other_in_process_writes(cli, db_path, tmp_path, entry):
    if not isinstance(db_path, Path):
        pytest.skip("reads the SQLite files")
    items = planted()
    results = IN_PROCESS[entry](cli, items)
    for result in results:
        assert result.exit_code == 0, result.stderr
    export = cli("export", "-o", str(tmp_path / "export.jsonl"))
    assert export.exit_code == 0, export.stderr
    found = leaks(tmp_path, items, *(r.stdout + r.stderr for r in results), export.stdout)
    assert not found, found
    stored = b"".join(f.read_bytes() for f in tmp_path.rglob("*") if f.is_file())
    assert stored.count(b"[REDACTED:") >= len(items), entry  # the carriers were written


# -- trust tier: the whole corpus through every entry ------------------------------------------
@pytest.fixture
def home(tmp_path) -> Iterator[tuple[Path, dict[str, str]]]:
    home = tmp_path / "home"
    run = home / "run"
    run.mkdir(mode=0o700, parents=True)
    env = memcli_env(home, home / "m.db")
    env["XDG_RUNTIME_DIR"] = str(run)
    yield home, env


def _finish(home: Path, env: dict[str, str], items: list[Planted], *outputs: str | bytes):
    export = memcli(env, "export", "-o", str(home / "export.jsonl"))
    assert "[REDACTED:" in (home / "export.jsonl").read_text()
    found = leaks(home, items, *outputs, export.stdout, export.stderr)
    assert not found, found


@pytest.mark.trust
def test_the_corpus_through_the_cli_in_process(home):
    home, env = home
    items = planted()
    lines = "\n".join(json.dumps(r) for r in records(items, "cli"))
    out = [memcli(env, "ingest", "-", "--json", stdin=lines)]
    out += [memcli(env, "remember", fact, "--user-id", "u1", "--json") for fact in facts(items)]
    reported = {k for e in json.loads(out[0].stdout)["redacted"] for k in e["kinds"]}
    assert len(reported) >= 40, reported
    _finish(home, env, items, *(o.stdout + o.stderr for o in out))


@pytest.mark.trust
@pytest.mark.parametrize("fmt", sorted(IMPORTERS))
def test_the_corpus_through_each_importer(home, fmt):
    home, env = home
    items = planted()
    source = home.parent / f"{fmt}.json"  # outside the searched home: it is the user's file
    source.write_text(json.dumps(IMPORTERS[fmt](items)))
    done = memcli(env, "import", "--from", fmt, str(source), "--json")
    assert json.loads(done.stdout)["redacted"], done.stdout
    _finish(home, env, items, done.stdout, done.stderr)


@pytest.mark.trust
@pytest.mark.daemon
def test_the_corpus_through_the_daemon_cli_http_and_mcp(home):
    """One daemon; four entries write the corpus through it, each under its own user."""
    home, env = home
    items = planted()
    db = Path(env["MEMCLI_DB"])
    routes = home.parent / "routes.log"
    outputs: list[str | bytes] = []
    memcli(env, "remember", "the corpus run starts", "--user-id", "setup")  # creates the file
    with Daemon(db, env) as served:
        assert served.proc is not None
        lines = "\n".join(json.dumps(r) for r in records(items, "fwd"))
        for args, stdin in [(["ingest", "-", "--json"], lines),
                            *((["remember", f, "--user-id", "u2", "--json"], None)
                              for f in facts(items))]:
            done = run_client(args, env, routes=routes, stdin=stdin)
            assert done.returncode == 0, done.stderr
            assert last_route(routes).startswith("daemon")
            outputs += [done.stdout, done.stderr]
        from memcli.service.daemon import paths

        http_sock = paths.endpoint(str(db), env).http_socket
        wait_for_socket(Path(http_sock), served.proc)
        with httpx.Client(transport=httpx.HTTPTransport(uds=http_sock),
                          base_url="http://localhost", timeout=120) as client:
            answer = client.post("/api/v1/events", json=records(items, "http"))
            assert answer.status_code < 300, answer.text
            outputs.append(answer.content)
            for fact in facts(items):
                answer = client.post("/api/v1/memories", json={"text": fact, "user_id": "u3"})
                assert answer.status_code < 300, answer.text
                outputs.append(answer.content)
            outputs += _ledger_over_http(client, items)
        outputs += anyio.run(_through_mcp, env, db, items)
        _code, out, log = stop(served.proc)  # the daemon's own output and log
    _finish(home, env, items, *outputs, out, log)


async def _through_mcp(env: dict[str, str], db: Path, items: list[Planted]) -> list[str]:
    """`memcli mcp` (the official client over stdio), which bridges to the running daemon."""
    texts: list[str] = []
    client = Client(stdio_params(env, "--db", str(db), "--user", "u4", "--tools", "all"),
                    mode="legacy",
                    read_timeout_seconds=120)
    async with client:
        for n, p in enumerate(items):
            result = await client.call_tool("memory_record_event",
                                            {"text": p.text, "event_id": f"mcp-{n}"})
            texts.append(payload(result) and result.content[0].text)
        for fact in facts(items):
            result = await client.call_tool("memory_remember", {"text": fact})
            texts.append(payload(result) and result.content[0].text)
        task = None
        for fact in facts(items):
            calls = [("memory_record_decision", {"decision": f"Use {fact}", **_lists(fact)}),
                     ("memory_record_task", {"title": f"Rotate {fact}", "details": fact,
                                             "refs": [fact]})]
            if task is not None:
                calls.append(("memory_update_task", {"task_id": task, "title": f"Again {fact}",
                                                     "details": fact, "refs": [fact]}))
            for tool, args in calls:
                result = await client.call_tool(tool, args)
                answer = payload(result)
                texts.append(result.content[0].text)
                if tool == "memory_record_task":
                    task = answer["result"]["id"]
    return texts


def _lists(fact: str) -> dict[str, list[str]]:
    """A decision's lists, each carrying the fact."""
    return {k: [fact] for k in ("rationale", "constraints", "alternatives", "consequences",
                                "refs")}


def _ledger_over_http(client: httpx.Client, items: list[Planted]) -> list[bytes]:
    """`POST /api/v1/decisions` and `/api/v1/tasks` (new and, with task_id, updated)."""
    out: list[bytes] = []
    task = None
    for fact in facts(items):
        bodies = [("/api/v1/decisions", {"decision": f"Use {fact}", "user_id": "u3",
                                         **_lists(fact)}),
                  ("/api/v1/tasks", {"title": f"Rotate {fact}", "details": fact,
                                     "refs": [fact], "user_id": "u3"})]
        if task is not None:
            bodies.append(("/api/v1/tasks", {"task_id": task, "title": f"Again {fact}",
                                             "details": fact, "refs": [fact], "user_id": "u3"}))
        for route, body in bodies:
            answer = client.post(route, json=body)
            assert answer.status_code < 300, answer.text
            out.append(answer.content)
        task = task if task is not None else answer.json()["id"]
    return out
