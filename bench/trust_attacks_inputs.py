"""bench/trust_attacks.py's hostile inputs: seeded malformed HTTP requests and MCP tool calls
(the fuzz), and the credential corpus planted through every write entry.

What it counts and how: bench/README.md, "Attacks on trust".
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from bench.trust_attacks_serve import MCP_HEADERS, Serve, memcli, scratch_env, tool_call
from tests.support.secrets_corpus import Planted, corpus

# (method, path with {id}/{app}/{artifact}, valid JSON body or query parameters)
ROUTES: tuple[tuple[str, str, dict], ...] = (
    ("POST", "/api/v1/events", {"text": "hello there", "session_id": "s1", "kind": "message",
                                "ts": "2025-01-01T00:00:00Z", "tags": ["a"]}),
    ("POST", "/api/v1/acb/build", {"query": "plan", "budget_tokens": 500, "session_id": "s1"}),
    ("GET", "/api/v1/artifacts/{artifact}", {}),
    ("POST", "/api/v1/decisions", {"decision": "Use SQLite", "rationale": ["small"],
                                   "supersedes": 1}),
    ("GET", "/api/v1/decisions/query", {"limit": 10, "status": "active"}),
    ("POST", "/api/v1/tasks", {"title": "Ship it", "task_id": 1, "status": "done"}),
    ("POST", "/api/v1/query", {"query": "plan", "top_k": 5, "filters": {"user_id": "alice"}}),
    ("GET", "/api/v1/memories/{id}/history", {"limit": 10}),
    ("POST", "/api/v1/memories", {"text": "Alice likes tea", "category": "preferences",
                                  "importance": 0.5}),
    ("DELETE", "/api/v1/memories/{id}", {}),
    ("GET", "/apps/{app}/memories", {"limit": 10}),
    ("DELETE", "/apps/{app}/memories", {}),
    ("DELETE", "/apps/{app}/memories/{id}", {}),
)
TOOLS: tuple[tuple[str, dict], ...] = (
    ("memory_query", {"query": "plan", "top_k": 5}),
    ("memory_build_acb", {"query": "plan", "budget_tokens": 500}),
    ("memory_record_event", {"text": "hello", "session_id": "s1"}),
    ("memory_get_artifact", {"artifact_id": "doc-1"}),
    ("memory_query_decisions", {"limit": 5}),
    ("memory_remember", {"text": "Bob likes coffee"}),
    ("memory_forget", {"memory_id": 1}),
    ("memory_record_decision", {"decision": "Use PostgreSQL", "supersedes": 1}),
    ("memory_update_task", {"task_id": 1, "status": "done"}),
    ("memory_history", {"memory_id": 1}),
    ("memory_app_memories", {"app_id": "a1", "limit": 5}),
    ("memory_purge_app", {"app_id": "a1", "memory_id": 1}),
)
HUGE = (10**25, -(10**25), 2**63, 2**64, 99999999999999999999999, -(2**63) - 1)
NEGATIVE = (-1, -100, -(10**6), 0)
JUNK = ("", " ", "\x00", "\ud800", "\udfff", "a\u0000b", "\u202eevil", "\u200b" * 50,
        "e\u0301" * 500, "💥🦘" * 100, "'; DROP TABLE memories; --", "%s%n%x", "../../etc/passwd",
        "\\", "null", "NaN", "\uffff", "\r\n\r\nX-Injected: 1")
WRONG = (None, True, False, [], {}, [1, "a"], {"a": {"b": [1]}}, 1.5, -0.0, "12", 7)
PATH_IDS = ("99999999999999999999999", str(2**63), str(2**64), "-1", "0", "abc", "1e5",
            "%00", "%F0%9F%92%A5", "9" * 400, "1.5", " 1")
BAD_JSON = (b"{", b'{"text": ', b"\xff\xfe\xc3(", b"null", b"[]", b'"text"', b"1e999",
            b"[" * 5000 + b"]" * 5000, b'{"text": "a", "text": 5}', b"", b"NaN",
            b'{"text": "\\ud800"}', b"\x00" * 64)


def _long(rng: random.Random) -> str:
    return rng.choice("xé漢💥") * rng.choice((5_000, 50_000, 100_000))


def _mutate_value(rng: random.Random, value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool):  # an id, a limit, a budget
        how = rng.choice(("huge", "huge", "negative", "wrong", "junk", "long"))
    else:
        how = rng.choice(("huge", "negative", "wrong", "junk", "long", "junk", "wrong"))
    if how == "huge":
        return rng.choice(HUGE)
    if how == "negative":
        return rng.choice(NEGATIVE)
    if how == "wrong":
        return rng.choice(WRONG)
    if how == "long":
        return _long(rng)
    return rng.choice(JUNK)


def mutate(rng: random.Random, body: dict) -> dict:
    """`body` broken 1-3 ways: fields dropped, changed to bad values, or unknown ones added."""
    body = dict(body)
    for _ in range(rng.randint(1, 3)):
        how = rng.random()
        if how < 0.2 and body:
            body.pop(rng.choice(sorted(body)))
        elif how < 0.85 and body:
            key = rng.choice(sorted(body))
            body[key] = _mutate_value(rng, body[key])
        else:
            key = rng.choice(("tenant_id", "user_id", "limit", "top_k", "memory_id", "category",
                              "filters", "sensitivity", "channel", "as_of", "ts", "zzz" * 50))
            body[key] = _mutate_value(rng, None)
    return body


def http_call(rng: random.Random) -> tuple[str, str, dict]:
    """(method, path, httpx request options) of one broken HTTP request."""
    method, path, valid = rng.choice(ROUTES)
    path = path.format(
        id=rng.choice(PATH_IDS) if rng.random() < 0.4 else str(rng.randint(1, 5)),
        app=rng.choice(("a1", "%00", "💥", "x" * 3000, "..", "%2F")),
        artifact=rng.choice(("doc-1", "x" * 5000, "%00", "💥", "../etc", "99999999999999999999")))
    options: dict[str, Any] = {}
    if method == "POST":
        roll = rng.random()
        if roll < 0.15:
            options["content"] = rng.choice(BAD_JSON)
            options["headers"] = {"Content-Type": "application/json"}
        elif roll < 0.2:
            options["content"] = json.dumps(valid).encode()
            options["headers"] = {"Content-Type": rng.choice(
                ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data",
                 "application/json; charset=latin-1"))}
        elif roll < 0.25:
            options.update(_json(rng.choice(([valid], "text", 5, None))))
        else:
            options.update(_json(mutate(rng, valid)))
    else:
        params = mutate(rng, valid) if valid or rng.random() < 0.5 else {}
        options["params"] = {k: (json.dumps(v) if not isinstance(v, str) else v)[:20_000]
                             for k, v in params.items()}  # a URL stays under 64 KB
    return method, path, options


def mcp_body(rng: random.Random, request_id: int) -> dict[str, Any]:
    """httpx request options of one broken MCP call to /mcp."""
    name, valid = rng.choice(TOOLS)
    arguments: Any = mutate(rng, valid)
    roll = rng.random()
    if roll < 0.08:
        arguments = rng.choice(([valid], "text", 5, None, [[]]))
    elif roll < 0.12:
        name = rng.choice(("memory.nothing", "", "x" * 2000, 5, None, "memory.\ud800"))
    params: Any = {"name": name, "arguments": arguments}
    if 0.12 <= roll < 0.17:
        params = rng.choice((None, [], "tools", {"arguments": arguments}))
    envelope: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
                                "params": params}
    if 0.17 <= roll < 0.2:
        envelope["id"] = rng.choice((None, [], {}, 10**30, "x" * 1000))
    if 0.2 <= roll < 0.25:
        return {"content": rng.choice(BAD_JSON), "headers": {
            **MCP_HEADERS, "Content-Type": "application/json"}}
    return {**_json(envelope), "headers": {**MCP_HEADERS, "Content-Type": "application/json"}}


def _json(value: Any) -> dict[str, Any]:
    """httpx options sending `value` as JSON, written here (ASCII, lone surrogates escaped) so
    that every client library sends the same bytes."""
    return {"content": json.dumps(value).encode(), "headers": {"Content-Type":
                                                                "application/json"}}


MARKERS = ("a bug in memcli", "unexpected error", "Traceback", "Internal Server Error")


def _why(text: str) -> str:
    """The part of an answer that says what failed."""
    at = min((text.find(m) for m in MARKERS if m in text), default=-1)
    if at < 0:
        return repr(text[:160])
    return repr(text[max(0, at - 80):at + 100])


def internal(status: int, text: str) -> bool:
    """An answer that says memcli failed, not the request: 5xx, JSON-RPC internal error, or an
    error text calling itself unexpected."""
    if status >= 500:
        return True
    if any(m in text for m in MARKERS):
        return True
    try:
        answer = json.loads(text)
    except ValueError:
        return False
    return isinstance(answer, dict) and isinstance(answer.get("error"), dict) and \
        answer["error"].get("code") == -32603


def fuzz(serve: Serve, calls: int, seed: int) -> dict[str, Any]:
    """`calls` broken requests, half HTTP and half MCP, interleaved; counts by outcome."""
    import httpx

    rng = random.Random(seed)
    counts = {"http": 0, "mcp": 0, "http_5xx": 0, "mcp_internal": 0, "timeouts": 0, "unsent": 0,
              "answered_2xx": 0}
    examples: list[str] = []
    with serve.client() as client:
        _seed_rows(client)
        for n in range(calls):
            kind = "http" if n % 2 == 0 else "mcp"
            if kind == "http":
                method, path, options = http_call(rng)
            else:
                method, path, options = "POST", "/mcp", mcp_body(rng, n)
            counts[kind] += 1
            try:
                r = client.request(method, path, timeout=60, **options)
            except httpx.TimeoutException:
                counts["timeouts"] += 1
                examples.append(f"{method} {path[:80]}: timeout")
                continue
            except (UnicodeError, httpx.InvalidURL):  # a URL the client cannot write
                counts["unsent"] += 1
                continue
            except httpx.HTTPError as exc:  # the daemon dropped the connection
                counts["http_5xx" if kind == "http" else "mcp_internal"] += 1
                examples.append(f"{method} {path[:80]}: {exc.__class__.__name__}")
                continue
            counts["answered_2xx"] += 200 <= r.status_code < 300
            if internal(r.status_code, r.text):
                counts["http_5xx" if kind == "http" else "mcp_internal"] += 1
                sent = options.get("content", options.get("params"))
                examples.append(f"{method} {path[:80]} {_short(sent)} -> {r.status_code} "
                                f"{_why(r.text)}")
    counts["daemon_tracebacks"] = serve.tracebacks()
    return {**counts, "examples": examples}


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) < 300 else text[:300] + f"... ({len(text)} chars)"


def _seed_rows(client: Any) -> None:
    """A few rows of each kind, so ids 1-5 exist."""
    for n in range(5):
        client.post("/api/v1/memories", json={"text": f"Fuzz fact {n}", "app_id": "a1"})
        client.post("/api/v1/decisions", json={"decision": f"Use fuzz {n}"})
        client.post("/api/v1/tasks", json={"title": f"Fuzz task {n}"})
        client.post("/api/v1/events", json={"kind": "artifact", "event_id": f"doc-{n}",
                                            "session_id": "s1", "text": f"doc {n}"})


FACT = 160  # carriers packed into facts this long (a fact holds 280 characters once redacted)


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


def _in_process(env: dict[str, str], home: Path, entry: str,
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


def _served(serve: Serve, entry: str,
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


def planted_secrets(scratch: Path) -> dict:
    """Every entry, each with its own draw of the corpus; the kinds found raw."""
    result: dict[str, Any] = {"entries": {}}
    for n, entry in enumerate(IN_PROCESS):
        items = corpus(1000 + n)
        env = scratch_env(scratch, f"secrets-{n}")
        home = Path(env["HOME"])
        answers, failed = _in_process(env, home, entry, items)
        memcli(env, home, "export", "-o", str(home / "export.jsonl"))
        result["entries"][entry] = {"raw": _files(items, home, answers), "of": len(items),
                                    "failed_writes": failed}
    env = scratch_env(scratch, "secrets-served")
    home = Path(env["HOME"])
    memcli(env, home, "remember", "the attack starts", "--user-id", "setup")
    drawn = {entry: corpus(2000 + n) for n, entry in enumerate(SERVED)}
    answers: dict[str, tuple[list[str], int]] = {}
    with Serve(env, home) as serve:
        for entry in SERVED:
            answers[entry] = _served(serve, entry, drawn[entry])
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
