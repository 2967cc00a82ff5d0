"""bench/trust_attacks.py's daemon attacks: token bindings and oversized bodies.

`Serve` runs a real `memcli serve --port` (the memcli of this Python) on a scratch database with
a token file of an operator and one token per binding; it is stopped (SIGTERM, then SIGKILL) and
checked gone when its block ends. Every request goes over 127.0.0.1, so the answers are what a
client of the installed version sees, whatever its internal API.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from tests.support.procs import processes, stop
from tests.support.trust import memcli_env

OPERATOR = "operator-token-0123456789abcdef"
INSIDE = {"tenant_id": "t1", "user_id": "alice", "app_id": "a1", "category": "projects"}
# binding name: (token, its binding in the token file, the row just outside it)
BINDINGS = {
    "tenant": ("bound-tenant-0123456789abcdef", "tenant=t1", {"tenant_id": "t2"}),
    "user": ("bound-user-0123456789abcdefgh", "tenant=t1 user=alice", {"user_id": "bob"}),
    "agent": ("bound-agent-0123456789abcdefg", "tenant=t1 agent=planner",
              {"category": "knowledge"}),  # the bundled allowlist: planner has no knowledge
    "app": ("bound-app-0123456789abcdefghi", "tenant=t1 app=a1", {"app_id": "a2"}),
    "categories": ("bound-categories-0123456789ab", "tenant=t1 categories=projects,tasks,"
                   "decisions", {"category": "knowledge"}),
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "X-Memcli-Tools": "all"}


def memcli(env: dict[str, str], cwd: Path, *args: str, stdin: str = "",
           timeout: float = 120) -> subprocess.CompletedProcess:
    """`python -m memcli ARGS` of this Python (cwd: a scratch folder, never a checkout)."""
    try:
        return subprocess.run([sys.executable, "-m", "memcli", *args], input=stdin, env=env,
                              cwd=cwd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        return subprocess.CompletedProcess(exc.cmd, 124, "", "timed out")


def scratch_env(scratch: Path, name: str, *, auto: bool = False) -> dict[str, str]:
    """A home of its own under `scratch` with a private runtime folder; `auto`: a command
    may start a daemon by itself (warm by default)."""
    home = scratch / name
    env = memcli_env(home, home / "m.db")
    (home / "run").mkdir(mode=0o700, parents=True, exist_ok=True)
    env["XDG_RUNTIME_DIR"] = str(home / "run")
    if auto:
        env.pop("MEMCLI_AUTOSTART", None)
    return env


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def rss_kb(pid: int, field: str = "VmRSS") -> int:
    """`field` of /proc/PID/status in kB (0 once the process is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def descendants(pid: int) -> list[int]:
    """Pids whose parent chain reaches `pid` (Linux /proc)."""
    parents = {p.pid: p.ppid for p in processes()}
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        kids = [p for p, pp in parents.items() if pp == parent]
        found += kids
        frontier += kids
    return found


class Serve:
    """`memcli serve --port` over `env["MEMCLI_DB"]`, with every binding's token."""

    def __init__(self, env: dict[str, str], scratch: Path) -> None:
        self.env, self.scratch = env, scratch
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = scratch / f"serve-{self.port}.log"
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> Serve:
        tokens = self.scratch / f"tokens-{self.port}"
        tokens.write_text("\n".join([OPERATOR] + [f"{t} {b}" for t, b, _ in BINDINGS.values()])
                          + "\n")
        tokens.chmod(0o600)
        with open(self.log, "wb") as log:
            # cwd: the scratch folder, so `-m memcli` is the installed one, not a checkout's
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "memcli", "serve", "--port", str(self.port),
                 "--token-file", str(tokens)], env=self.env, cwd=self.scratch,
                stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        try:
            self._wait()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _wait(self, timeout: float = 120) -> None:
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise SystemExit(f"memcli serve exited {self.proc.returncode}: "
                                 f"{self.log.read_text()[-800:]}")
            try:
                if httpx.get(self.url + "/healthz", timeout=2).status_code < 500:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise SystemExit(f"memcli serve did not answer on {self.url} in {timeout:.0f} s")

    def __exit__(self, *exc: object) -> None:
        if self.proc is None:
            return
        kids = descendants(self.proc.pid)
        stop(self.proc)
        for pid in kids:  # a forked worker the daemon did not reap
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def tracebacks(self) -> int:
        return self.log.read_text(errors="replace").count("Traceback")

    def client(self, token: str = OPERATOR) -> Any:
        import httpx

        return httpx.Client(base_url=self.url, timeout=120,
                            headers={"Authorization": f"Bearer {token}"})


def tool_call(client: Any, name: str, arguments: Any, request_id: int = 1) -> tuple[int, Any]:
    """(HTTP status, the JSON-RPC answer or None) of one MCP tools/call through /mcp."""
    body = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
            "params": {"name": name, "arguments": arguments}}
    r = client.post("/mcp", json=body, headers=MCP_HEADERS)
    try:
        return r.status_code, r.json()
    except ValueError:
        return r.status_code, None


def tool_ok(answer: Any) -> bool:
    """An MCP answer that is a tool result, not an error."""
    if not isinstance(answer, dict) or "result" not in answer:
        return False
    return not answer["result"].get("isError")


def _id(payload: Any, *keys: str) -> Any:
    """The first of `keys` found in a JSON answer (any depth: the answers' shapes moved)."""
    if isinstance(payload, dict):
        for key in keys:
            if payload.get(key) is not None:
                return payload[key]
        payload = list(payload.values())
    if isinstance(payload, list):
        for item in payload:
            found = _id(item, *keys)
            if found is not None:
                return found
    return None


def make_rows(op: Any, where: dict[str, str], tag: str) -> dict[str, Any]:
    """A memory, an artifact event and (in a ledger category) a decision and a task of scope
    `where`, made by the operator over HTTP."""
    scope = {k: v for k, v in where.items() if k != "category"}

    def post(path: str, body: dict) -> Any:
        r = op.post(path, json=body)
        if r.status_code >= 300:
            raise SystemExit(f"setting up: POST {path} answered {r.status_code}: {r.text[:300]}")
        return r.json()

    rows: dict[str, Any] = {"memory": _id(post("/api/v1/memories", {
        **scope, "text": f"Quokka plan {tag}", "category": where["category"]}), "id",
        "memory_id")}
    post("/api/v1/events", {**scope, "kind": "artifact", "event_id": f"doc-{tag}",
                            "session_id": f"s-{tag}", "category": where["category"],
                            "text": f"design doc {tag}"})
    rows["artifact"] = f"doc-{tag}"
    if where["category"] == INSIDE["category"]:  # decisions and tasks have their own category
        rows["decision"] = _id(post("/api/v1/decisions", {**scope, "decision": f"Use {tag}"}),
                               "id", "decision_id")
        rows["task"] = _id(post("/api/v1/tasks", {**scope, "title": f"Ship {tag}"}), "id",
                           "task_id")
    return rows


def _by_id(rows: dict[str, Any]) -> list[tuple[str, str, str, dict | None]]:
    """(name, method, path, JSON body) of every HTTP route acting on one row; reads first."""
    calls = [("GET artifact", "GET", f"/api/v1/artifacts/{rows['artifact']}", None),
             ("GET history", "GET", f"/api/v1/memories/{rows['memory']}/history", None)]
    if "decision" in rows:
        calls.append(("POST decision supersedes", "POST", "/api/v1/decisions",
                      {"decision": "Use more", "supersedes": rows["decision"]}))
        calls.append(("POST task update", "POST", "/api/v1/tasks",
                      {"task_id": rows["task"], "status": "done"}))
    calls += [("DELETE memory", "DELETE", f"/api/v1/memories/{rows['memory']}", None),
              ("DELETE app memory", "DELETE", f"/apps/a1/memories/{rows['memory']}", None)]
    return calls


def _tools(rows: dict[str, Any]) -> list[tuple[str, dict]]:
    """(tool, arguments) of every MCP tool acting on one row; reads first."""
    calls = [("memory_get_artifact", {"artifact_id": rows["artifact"]}),
             ("memory_history", {"memory_id": rows["memory"]})]
    if "decision" in rows:
        calls.append(("memory_record_decision", {"decision": "Use more",
                                                 "supersedes": rows["decision"]}))
        calls.append(("memory_update_task", {"task_id": rows["task"], "status": "done"}))
    calls += [("memory_forget", {"memory_id": rows["memory"]}),
              ("memory_purge_app", {"app_id": "a1", "memory_id": rows["memory"]})]
    return calls


# Requests naming a scope outside the binding, on the binding's own rows: (name, method, path,
# body) with "{key}"/"{value}" standing for the scope field and its outside value.
NAMED = (
    ("POST events", "POST", "/api/v1/events", {"text": "named", "session_id": "s9"}),
    ("POST memory", "POST", "/api/v1/memories", {"text": "Named quokka"}),
    ("POST task update", "POST", "/api/v1/tasks", {"task_id": "{task}", "status": "doing"}),
    ("POST decision", "POST", "/api/v1/decisions", {"decision": "Use named"}),
    ("POST query", "POST", "/api/v1/query", {"query": "Quokka plan"}),
)


# The request field naming a scope just outside each binding.
NAMED_FIELD = {"tenant": ("tenant_id", "t2"), "user": ("user_id", "bob"),
               "agent": ("agent_id", "stylist"), "app": ("app_id", "a2"),
               "categories": ("category", "knowledge")}


def _named(route: str, body: dict, binding: str, task: Any) -> dict | None:
    """`body` naming the scope outside `binding` (None: the route has no such field)."""
    key, value = NAMED_FIELD[binding]
    sent = {k: (task if v == "{task}" else v) for k, v in body.items()}
    if key == "category":
        if route == "POST query":
            return {**sent, "categories": [value]}
        return {**sent, key: value} if route in ("POST events", "POST memory") else None
    if route == "POST query":
        return {**sent, "agent": value} if key == "agent_id" else {**sent, "filters": {key: value}}
    return {**sent, key: value}


def bindings(serve: Serve, out: str = "outx") -> dict[str, Any]:
    """Each bound token against rows just outside its binding: 2xx answers that read or
    changed such a row (HTTP route or MCP tool), listings that showed one, and requests naming
    a scope outside the binding that were answered 2xx."""
    leaks: list[str] = []
    named: list[str] = []
    control: list[str] = []  # a row inside the binding not answered: the attack would be void
    with serve.client() as op:
        inside = make_rows(op, INSIDE, "in")
        outside = {name: (make_rows(op, {**INSIDE, **o}, f"{out}-{name}-h"),
                          make_rows(op, {**INSIDE, **o}, f"{out}-{name}-m"))
                   for name, (_t, _b, o) in BINDINGS.items()}
    for name, (token, _binding, _outside) in BINDINGS.items():
        for_http, for_mcp = outside[name]
        with serve.client(token) as client:
            for route, method, path, _body in _by_id(inside)[:2]:
                r = client.request(method, path)
                if r.status_code != 200:
                    control.append(f"{name}: {route} inside -> {r.status_code}")
            status, answer = tool_call(client, "memory_history", {"memory_id": inside["memory"]})
            if status != 200 or not tool_ok(answer):
                control.append(f"{name}: memory.history inside -> {str(answer)[:120]}")
            for route, method, path, body in _by_id(for_http):
                r = client.request(method, path, json=body) if body else client.request(
                    method, path)
                if 200 <= r.status_code < 300 and (method != "GET" or _holds(r.text)):
                    leaks.append(f"{name}: {route} -> {r.status_code} {r.text[:60]}")
            for tool, arguments in _tools(for_mcp):
                status, answer = tool_call(client, tool, arguments)
                if status == 200 and tool_ok(answer) and (
                        tool not in READ_TOOLS or _holds(answer["result"]["content"][0]["text"])):
                    leaks.append(f"{name}: {tool} -> ok")
            leaks += [f"{name}: {what} listed an outside row"
                      for what in _listings(client, f"{out}-{name}")]
            for route, method, path, body in NAMED:
                sent = _named(route, body, name, inside["task"])
                if sent is not None:
                    r = client.request(method, path, json=sent)
                    if 200 <= r.status_code < 300:
                        named.append(f"{name}: {route} {json.dumps(sent)} -> {r.status_code}")
    return {"leaks": len(leaks), "named_scope_accepted": len(named),
            "controls_failed": len(control), "leak_list": leaks, "named_list": named,
            "control_list": control}


READ_TOOLS = ("memory_get_artifact", "memory_history")


def _holds(text: str) -> bool:
    """Whether a read's JSON answer holds anything (an empty history answers a row it does not
    show: `[]`, or MCP's `{"scope": ..., "result": []}`)."""
    try:
        payload = json.loads(text)
    except ValueError:
        return bool(text.strip())
    if isinstance(payload, dict) and "scope" in payload and "result" in payload:
        payload = payload["result"]
    return payload not in ([], {}, None, "")


def _listings(client: Any, tag: str) -> list[str]:
    """The listing routes and tools whose answer showed a row tagged `tag`."""
    shown = []
    answers = {
        "POST query": client.post("/api/v1/query", json={"query": "Quokka plan design doc",
                                                         "top_k": 50}),
        "GET decisions": client.get("/api/v1/decisions/query"),
        "GET app memories": client.get("/apps/a1/memories"),
    }
    for what, r in answers.items():
        if 200 <= r.status_code < 300 and tag in r.text:
            shown.append(what)
    for tool, arguments in (("memory_query", {"query": "Quokka plan design doc", "top_k": 50}),
                            ("memory_query_decisions", {}),
                            ("memory_app_memories", {"app_id": "a1"})):
        status, answer = tool_call(client, tool, arguments)
        if status == 200 and tool_ok(answer) and tag in json.dumps(answer):
            shown.append(tool)
    return shown


# -- oversized bodies ----------------------------------------------------------------------
BODY_MB = 100
CHUNK = 1 << 20


def _post_big(port: int, chunked: bool, results: list, lock: threading.Lock) -> None:
    """POST BODY_MB of JSON-looking bytes to /api/v1/events, stopping when the server closes;
    appends the status line (or what happened)."""
    head = (f"POST /api/v1/events HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Authorization: Bearer {OPERATOR}\r\nContent-Type: application/json\r\n")
    head += ("Transfer-Encoding: chunked\r\n" if chunked
             else f"Content-Length: {BODY_MB * CHUNK}\r\n")
    piece = b'{"text": "' + b"a" * (CHUNK - 10)
    sent, status = 0, "no answer"
    with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
        try:
            sock.sendall((head + "\r\n").encode())
            for n in range(BODY_MB):
                data = piece if n == 0 else b"a" * CHUNK
                if n == BODY_MB - 1:
                    data = data[:-2] + b'"}'
                sock.sendall(b"%x\r\n%s\r\n" % (len(data), data) if chunked else data)
                sent += len(data)
            if chunked:
                sock.sendall(b"0\r\n\r\n")
        except OSError:
            pass  # the server stopped reading: refused early
        try:
            answer = sock.recv(4096).split(b"\r\n", 1)[0].decode(errors="replace")
            status = answer or "closed"
        except OSError as exc:
            status = f"closed ({exc.__class__.__name__})"
    with lock:
        results.append({"status": status, "sent_mb": round(sent / CHUNK, 1)})


def oversized(serve: Serve, chunked: bool, clients: int = 3) -> dict[str, Any]:
    """The daemon's memory growth (peak VmRSS, sampled every 10 ms, of the daemon and any
    process it started, minus before) while `clients` post BODY_MB each at once."""
    time.sleep(0.5)

    def tree_rss() -> int:
        return sum(rss_kb(p) for p in [serve.pid, *descendants(serve.pid)])

    before, hwm_before = tree_rss(), rss_kb(serve.pid, "VmHWM")
    peak, done = before, threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, tree_rss())
            time.sleep(0.01)

    sampler = threading.Thread(target=sample)
    sampler.start()
    results: list = []
    lock = threading.Lock()
    posts = [threading.Thread(target=_post_big, args=(serve.port, chunked, results, lock))
             for _ in range(clients)]
    for t in posts:
        t.start()
    for t in posts:
        t.join()
    time.sleep(0.5)
    done.set()
    sampler.join()
    hwm = rss_kb(serve.pid, "VmHWM")
    if hwm > hwm_before:  # a peak between two samples
        peak = max(peak, hwm)
    return {"rss_before_mb": round(before / 1024, 1), "rss_peak_mb": round(peak / 1024, 1),
            "growth_mb": round((peak - before) / 1024, 1),
            "answers": sorted(r["status"] for r in results),
            "sent_mb": sorted(r["sent_mb"] for r in results)}
