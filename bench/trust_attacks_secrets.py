"""The planted-secrets attack of bench/trust_attacks.py: the credential corpus through every write
entry, then the raw bytes of the database, its WAL, the export and the daemon's log searched.

The corpus is tests/support/secrets_corpus.py (79 kinds, real-shaped fake values in their
sentences: gitleaks' token shapes, labelled values, "my PIN is ...", a repeated label, IBANs and
national ids with valid check digits...), a fresh draw for each entry. Entries, each through a
real process: `memcli ingest` and `memcli remember` in-process; `memcli import --from claude`,
`chatgpt` and `mem0`; and, against a running `memcli serve`, `ingest` forwarded to it, `POST
/api/v1/events`, `POST /api/v1/memories` and the MCP tools `memory_record_event` and
`memory_remember` at /mcp. Counted: planted values of which a random part is found in any file
under the entry's home (database, -wal, -shm, `export -o` file, the daemon's log) or in an
answer.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.trust_attacks_serve import Serve, tool_call
from tests.support.secrets_corpus import Planted, corpus

FACT = 160  # carriers packed into facts this long (a fact holds 280 characters once redacted)

Run = Callable[..., Any]  # memcli(env, cwd, *args, stdin=...) -> CompletedProcess


def _records(items: list[Planted], tag: str) -> list[dict[str, Any]]:
    return [{"session_id": f"s-{tag}", "user_id": "u1", "event_id": f"{tag}-{n}",
             "content": {"text": p.text}} for n, p in enumerate(items)]


def _facts(items: list[Planted]) -> list[str]:
    out: list[str] = []
    for p in items:
        if out and len(out[-1]) + 1 + len(p.text) <= FACT:
            out[-1] += "\n" + p.text
        else:
            out.append(p.text)
    return out


def _files(items: list[Planted], home: Path, answers: list[str]) -> list[str]:
    blobs = [f.read_bytes() for f in home.rglob("*") if f.is_file()]
    blobs += [a.encode() for a in answers]
    return sorted({p.kind for p in items for needle in p.needles
                   if any(needle.encode() in blob for blob in blobs)})


def _import_file(fmt: str, items: list[Planted]) -> Any:
    if fmt == "claude":
        return [{"uuid": "c1", "name": "keys", "created_at": "2024-03-01T09:00:00Z",
                 "chat_messages": [{"uuid": f"m{n}", "sender": "human", "text": p.text,
                                    "content": [{"type": "text", "text": p.text}],
                                    "created_at": f"2024-03-01T09:{n // 60:02d}:{n % 60:02d}Z"}
                                   for n, p in enumerate(items)]}]
    if fmt == "mem0":
        return {"results": [{"id": f"mem-{n}", "memory": p.text, "user_id": "u1",
                             "created_at": "2024-03-01T09:00:00Z"} for n, p in enumerate(items)]}
    ids = [f"n{n}" for n in range(len(items))]
    mapping: dict[str, Any] = {"root": {"id": "root", "parent": None, "children": ids[:1],
                                        "message": None}}
    for n, p in enumerate(items):
        mapping[ids[n]] = {"id": ids[n], "parent": ids[n - 1] if n else "root",
                           "children": ids[n + 1:n + 2],
                           "message": {"id": ids[n], "author": {"role": "user"},
                                       "create_time": 1.7e9 + n,
                                       "content": {"content_type": "text", "parts": [p.text]}}}
    return [{"title": "keys", "create_time": 1.7e9, "conversation_id": "c1",
             "mapping": mapping, "current_node": ids[-1]}]


def _in_process(memcli: Run, env: dict[str, str], home: Path, entry: str,
                items: list[Planted]) -> tuple[list[str], int]:
    """One entry without a daemon: its answers (stdout and stderr) and failed writes."""
    done = []
    if entry == "cli ingest":
        lines = "\n".join(json.dumps(r) for r in _records(items, "cli"))
        done.append(memcli(env, home, "ingest", "-", "--json", stdin=lines))
    elif entry == "cli remember":
        done += [memcli(env, home, "remember", f, "--user-id", "u1", "--json")
                 for f in _facts(items)]
    else:
        fmt = entry.removeprefix("import --from ")
        source = home.parent / f"{home.name}-{fmt}.json"  # the user's file, outside the home
        source.write_text(json.dumps(_import_file(fmt, items)))
        done.append(memcli(env, home, "import", "--from", fmt, str(source), "--json"))
    return [d.stdout + d.stderr for d in done], sum(d.returncode != 0 for d in done)


def _served(memcli: Run, serve: Serve, entry: str,
            items: list[Planted]) -> tuple[list[str], int]:
    """One entry against the running daemon: its answers and failed writes."""
    if entry == "cli ingest, forwarded":
        lines = "\n".join(json.dumps(r) for r in _records(items, "fwd"))
        done = memcli(serve.env, serve.scratch, "ingest", "-", "--json", stdin=lines)
        return [done.stdout + done.stderr], int(done.returncode != 0)
    calls: list[tuple[int, Any]] = []
    with serve.client() as client:
        if entry == "http events":
            r = client.post("/api/v1/events", json=_records(items, "http"))
            calls.append((r.status_code, r.text))
        elif entry == "http memories":
            for f in _facts(items):
                r = client.post("/api/v1/memories", json={"text": f, "user_id": "u3"})
                calls.append((r.status_code, r.text))
        elif entry == "mcp record_event":
            calls += [tool_call(client, "memory_record_event",
                                {"text": p.text, "event_id": f"mcp-{n}"})
                      for n, p in enumerate(items)]
        else:  # mcp remember
            calls += [tool_call(client, "memory_remember", {"text": f}) for f in _facts(items)]
    answers = [a if isinstance(a, str) else json.dumps(a) for _, a in calls]
    failed = sum(status >= 300 or '"isError": true' in a or '"error"' in a
                 for (status, _), a in zip(calls, answers, strict=True))
    return answers, failed


IN_PROCESS = ("cli ingest", "cli remember", "import --from claude", "import --from chatgpt",
              "import --from mem0")
SERVED = ("cli ingest, forwarded", "http events", "http memories", "mcp record_event",
          "mcp remember")


def planted_secrets(scratch: Path, memcli: Run, env_of: Callable[[Path, str],
                                                                  dict[str, str]]) -> dict:
    """Every entry, each with its own draw of the corpus; the kinds found raw."""
    result: dict[str, Any] = {"entries": {}}
    for n, entry in enumerate(IN_PROCESS):
        items = corpus(1000 + n)
        env = env_of(scratch, f"secrets-{n}")
        home = Path(env["HOME"])
        answers, failed = _in_process(memcli, env, home, entry, items)
        memcli(env, home, "export", "-o", str(home / "export.jsonl"))
        result["entries"][entry] = {"raw": _files(items, home, answers), "of": len(items),
                                    "failed_writes": failed}
    env = env_of(scratch, "secrets-served")
    home = Path(env["HOME"])
    memcli(env, home, "remember", "the attack starts", "--user-id", "setup")
    drawn = {entry: corpus(2000 + n) for n, entry in enumerate(SERVED)}
    answers: dict[str, tuple[list[str], int]] = {}
    with Serve(env, home) as serve:
        for entry in SERVED:
            answers[entry] = _served(memcli, serve, entry, drawn[entry])
    memcli(env, home, "export", "-o", str(home / "export.jsonl"))  # the log is in `home` too
    for entry, items in drawn.items():
        said, failed = answers[entry]
        result["entries"][entry] = {"raw": _files(items, home, said), "of": len(items),
                                    "failed_writes": failed}
    rows = result["entries"].values()
    result["raw"] = sum(len(r["raw"]) for r in rows)
    result["of"] = sum(r["of"] for r in rows)
    result["raw_kinds"] = sorted({k for r in rows for k in r["raw"]})
    result["failed_writes"] = sum(r["failed_writes"] for r in rows)
    return result
