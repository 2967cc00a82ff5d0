"""bench/trust_attacks.py's attacks from the local machine: who a daemon is and which database
it serves, the files other local users can read, and the pages' login.

What it counts and how: bench/README.md, "Attacks on trust".
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.trust_attacks_serve import MCP_HEADERS, OPERATOR, Serve, free_port, memcli, scratch_env
from tests.support.daemon import wait_until
from tests.support.procs import processes, stop
from tests.support.sockets import answers, second_user
from tests.support.trust import memcli_env

STARTER = {"MEMCLI_TENANT": "acme", "GITHUB_TOKEN": "ghp_starter0123456789",
           "AWS_SECRET_ACCESS_KEY": "aws-starter-secret-0123456789"}


def serving(text: str) -> list[int]:
    """Pids of `memcli serve` processes whose command line or environment names `text`."""
    found = []
    for p in processes():
        argv = b" ".join(p.argv)
        if p.pid != os.getpid() and not p.zombie and b"serve" in argv and (
                text.encode() in argv or any(text.encode() in v for v in p.environ or ())):
            found.append(p.pid)
    return found


def stop_all(text: str) -> None:
    """Stop every daemon naming `text` (SIGTERM, then SIGKILL)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in serving(text):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        if wait_until(lambda: not serving(text), 30):
            return


def environ_of(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read()
    except OSError:
        return b""


def tenants(db: Path) -> dict[str, str]:
    import apsw

    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return dict(conn.execute("SELECT content, tenant_id FROM memories"))
    finally:
        conn.close()


def http(path: str, db: Path | None = None) -> Any:
    """A client of a daemon's HTTP socket; `db`: the database named to the user's daemon."""
    import httpx

    headers = {"X-Memcli-Db": str(db)} if db is not None else {}
    return httpx.Client(transport=httpx.HTTPTransport(uds=path), base_url="http://localhost",
                        timeout=120, headers=headers)


def mcp_remember(client: Any, text: str) -> bool:
    listed = client.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                         headers=MCP_HEADERS)
    names = [t["name"] for t in listed.json()["result"]["tools"]
             if t["name"].endswith("remember")]
    called = client.post("/mcp", headers=MCP_HEADERS, json={
        "jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": names[0], "arguments": {"text": text}}})
    return called.status_code == 200 and not called.json()["result"].get("isError")


# -- 1 -------------------------------------------------------------------------------------
def starter_identity(scratch: Path) -> dict[str, Any]:
    from memcli.service.daemon import paths

    env = scratch_env(scratch, "identity", auto=True)
    config = Path(env["MEMCLI_CONFIG"])
    home = Path(env["HOME"])
    db = Path(env["MEMCLI_DB"])
    # The user's daemon (what the CLI starts) serves an HTTP request naming no database from
    # the config file's: this one.
    config.write_text(config.read_text() + f"tenant: home-team\ndb: '{db}'\n")
    memcli(env, home, "--no-daemon", "remember", "seed: the office has a plant")
    ep = paths.user_endpoint(env)
    try:
        memcli({**env, **STARTER}, home, "stats")
        if not wait_until(lambda: answers(ep.http_socket), 120):
            return {"skipped": "no daemon was started"}
        environ = environ_of(int(Path(ep.pid).read_text()))
        kept = [k for k, v in STARTER.items() if v.encode() in environ]
        with http(ep.http_socket, db) as client:
            r = client.post("/api/v1/memories", json={"text": "http: water the plant"})
            wrote_http = r.status_code in (200, 201)
            wrote_mcp = mcp_remember(client, "mcp: the plant sits by the window")
        forwarded = memcli({**env, "MEMCLI_TENANT": "globex"}, home, "remember",
                           "cli: globex waters it on Mondays")
        found = tenants(db)
        landed = {"http": found.get("http: water the plant"),
                  "mcp": found.get("mcp: the plant sits by the window")}
        return {"starter_values_kept": len(kept), "of": len(STARTER), "kept": kept,
                "unscoped_in_starter_tenant": sum(t == "acme" for t in landed.values()),
                "unscoped_of": 2, "landed": landed, "writes_ok": wrote_http and wrote_mcp,
                "forwarded_control": forwarded.returncode == 0
                and found.get("cli: globex waters it on Mondays") == "globex"}
    finally:
        stop_all(env["XDG_RUNTIME_DIR"])
        stop_all(str(db))


# -- 2 -------------------------------------------------------------------------------------
def repointed_link(scratch: Path) -> dict[str, Any]:
    from memcli.service.daemon import paths

    env = scratch_env(scratch, "link", auto=False)
    home = Path(env["HOME"])
    a, b, link = home / "a.db", home / "b.db", home / "link.db"
    for db, text in ((a, "alpha: tea"), (b, "beta: coffee")):
        memcli(env, home, "--db", str(db), "remember", text)
    link.symlink_to(a)
    ep = paths.endpoint(str(a), env)
    log = open(home / "serve.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "memcli", "serve", "--db", str(link)],
                            env=env, cwd=home, stdin=subprocess.DEVNULL, stdout=log,
                            stderr=log)
    try:
        if not wait_until(lambda: answers(ep.http_socket), 120):
            return {"skipped": "the daemon did not come up"}
        tmp = home / "link.tmp"
        tmp.symlink_to(b)
        os.replace(tmp, link)
        with http(ep.http_socket) as client:
            client.post("/api/v1/memories", json={"text": "after: a note for a"})
        return {"writes_in_other_db": int("after: a note for a" in tenants(b)), "of": 1,
                "in_own_db": int("after: a note for a" in tenants(a))}
    finally:
        stop(proc)
        log.close()


# -- 3 -------------------------------------------------------------------------------------
def config_db(scratch: Path) -> dict[str, Any]:
    from memcli.service.daemon import paths

    env = scratch_env(scratch, "configdb", auto=True)
    home = Path(env["HOME"])
    team = home / "team.db"
    env.pop("MEMCLI_DB")
    config = Path(env["MEMCLI_CONFIG"])
    config.write_text(config.read_text() + f"db: '{team}'\n")
    default = Path(paths.default_db(env))
    # The user's daemon serves the configured database; none is started for the default path.
    own, stray = paths.user_endpoint(env), paths.endpoint(str(default), env)
    try:
        memcli(env, home, "remember", "the team meets on Tuesdays")
        wait_until(lambda: answers(own.socket) or answers(stray.socket), 90)
        time.sleep(2)  # a daemon of the default path creates its database as it starts
        return {"stray_daemon": int(os.path.exists(stray.lock)),
                "default_db_created": int(default.exists()),
                "configured_daemon_answers": answers(own.socket)}
    finally:
        stop_all(env["XDG_RUNTIME_DIR"])


# -- 4 -------------------------------------------------------------------------------------
def unopenable_db(scratch: Path) -> dict[str, Any]:
    env = scratch_env(scratch, "unopenable", auto=False)
    home = Path(env["HOME"])
    proc = subprocess.Popen([sys.executable, "-m", "memcli", "serve", "--db",
                             "/proc/nope/x.db"], env=env, cwd=home, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        code = proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        code = None
    _out, err = stop(proc)
    return {"exit": code, "stderr_lines": len(err.splitlines()),
            "first_line": (err.splitlines() or [""])[0][:160]}


# -- 5 -------------------------------------------------------------------------------------
def foreign_runtime_folder(scratch: Path) -> dict[str, Any]:
    from memcli.service.daemon import paths

    user = second_user()
    if user is None:
        return {"skipped": "needs root and a user `nobody`"}
    result: dict[str, Any] = {"silent": 0, "no_fix": 0, "of": 2, "modes": {}}
    for mode in ("manual", "auto"):
        env = scratch_env(scratch, f"foreign-{mode}", auto=mode == "auto")
        folder = Path(paths.runtime_dir(env))
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chown(folder, *user)
        try:
            done = memcli(env, Path(env["HOME"]), "remember", "the folder is checked")
            lines = [line for line in done.stderr.splitlines() if str(folder) in line]
            result["silent"] += not lines
            result["no_fix"] += bool(lines) and "XDG_RUNTIME_DIR" not in lines[0]
            result["modes"][mode] = {"exit": done.returncode, "stderr": done.stderr[-300:]}
        finally:
            stop_all(env["XDG_RUNTIME_DIR"])
            shutil.rmtree(folder, ignore_errors=True)
    return result


# -- 6 -------------------------------------------------------------------------------------
def _serve_up(env: dict[str, str], home: Path, sock: str) -> tuple[bool, list[str]]:
    proc = subprocess.Popen([sys.executable, "-m", "memcli", "serve"], env=env, cwd=home,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    up = wait_until(lambda: answers(sock) or proc.poll() is not None, 90) and proc.poll() is None
    _out, err = stop(proc)
    return up, ([] if up else err.strip().splitlines()[-1:])


def _auto_forwarded(env: dict[str, str], home: Path, sock: str) -> bool:
    memcli(env, home, "stats")
    wait_until(lambda: answers(sock), 60)
    status = memcli(env, home, "serve", "status")
    try:
        return bool(json.loads(status.stdout).get("answered"))
    except ValueError:
        return False


def long_runtime_folder(scratch: Path) -> dict[str, Any]:
    from memcli.service.daemon import paths

    out: dict[str, Any] = {}
    for how in ("serve", "auto-start"):
        env = scratch_env(scratch, f"long-{how}", auto=how == "auto-start")
        home = Path(env["HOME"])
        run = home / ("r" * (100 - len(str(home)) - 1))
        run.mkdir(mode=0o700, parents=True)
        env["XDG_RUNTIME_DIR"] = str(run)
        # `serve` by hand: the database's daemon; auto-start: the user's.
        ep = (paths.endpoint(env["MEMCLI_DB"], env) if how == "serve"
              else paths.user_endpoint(env))
        folder, sock = os.path.dirname(ep.socket), ep.socket
        memcli(env, home, "--no-daemon", "remember", "the long folder works")
        try:
            if how == "serve":
                out["serve_up"], out["serve_stderr"] = _serve_up(env, home, sock)
            else:
                out["auto_start_forwarded"] = _auto_forwarded(env, home, sock)
        finally:
            stop_all(str(run))
            stop_all(folder)
            if not folder.startswith(str(run)):
                shutil.rmtree(folder, ignore_errors=True)
    return out


STEPS = {
    "starter_identity": starter_identity,
    "repointed_link": repointed_link,
    "config_db": config_db,
    "unopenable_db": unopenable_db,
    "foreign_runtime_folder": foreign_runtime_folder,
    "long_runtime_folder": long_runtime_folder,
}


# Their rows in bench/trust_attacks.py's summary: (what, the attack, its figure).
ROWS: tuple[tuple[str, str, Any], ...] = (
    ("auto-start: starter's values in the daemon's environ", "starter_identity",
     "{starter_values_kept} of {of}"),
    ("auto-start: unscoped HTTP/MCP writes in the starter's tenant", "starter_identity",
     "{unscoped_in_starter_tenant} of {unscoped_of}"),
    ("re-pointed link: daemon writes into the other database", "repointed_link",
     "{writes_in_other_db} of {of}"),
    ("config db: stray daemon / database at the default path", "config_db",
     "{stray_daemon} / {default_db_created}"),
    ("serve --db /proc/nope/x.db: exit code (null: stays up)", "unopenable_db",
     "{exit} ({stderr_lines} stderr lines)"),
    ("runtime folder of another user: silent runs / no fix named", "foreign_runtime_folder",
     "{silent} / {no_fix} of {of}"),
    ("100-char runtime folder: serve up / auto-start forwarded", "long_runtime_folder",
     lambda r: f"{r.get('serve_up')} / {r.get('auto_start_forwarded')}"),
)


FLOOD = 10_000
GUESSES = 30
_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def _open(path: Path) -> bool:
    return bool(stat.S_IMODE(path.stat().st_mode) & 0o077)


def file_modes(scratch: Path) -> dict[str, Any]:
    home = scratch / "modes"
    db = home / "fresh" / "folder" / "memory.db"
    env = memcli_env(home, db)
    old = os.umask(0o022)  # the children inherit it
    try:
        records = "\n".join(json.dumps({"user_id": "priya", "session_id": "s1",
                                        "text": f"Priya's passport is in the blue folder {i}"})
                            for i in range(3))
        memcli(env, home, "ingest", "-", stdin=records)
        memcli(env, home, "remember", "Priya keeps her passport in the blue folder",
             "--user-id", "priya")
        memcli(env, home, "export", "-o", str(home / "export.jsonl"))
        memcli(env, home, "view", "export", str(home / "views" / "priya"), "--user-id", "priya")
        memcli(env, home, "hook", "record", "--db", str(home), stdin='{"prompt": "hi"}')
        _serve_once(env, home)  # `serve --port` makes the token file before it answers
        memcli(env, home, "stats")  # opened again: SQLite makes its WAL and SHM from the file
        files = sorted(p for p in home.rglob("*") if p.is_file()
                       and p.name not in ("memcli.yaml",))
        folders = [db.parent, db.parent.parent, home / "views", home / "views" / "priya"]
        readable = [str(p.relative_to(home)) for p in files if _open(p)]
        entered = [str(p.relative_to(home)) for p in folders if p.exists() and _open(p)]
        # An existing database others can read: named by doctor?
        os.chmod(db, 0o644)
        doctor = memcli(env, home, "doctor", "--json")
        try:
            checks = json.loads(doctor.stdout)["checks"]
        except (ValueError, KeyError):
            checks = []
        named = [c for c in checks if c.get("check") == "permissions"
                 and c.get("status") == "problem"]
    finally:
        os.umask(old)
    return {"files": len(files), "checked": [str(p.relative_to(home)) for p in files],
            "readable_by_others": readable,
            "folders": sum(p.exists() for p in folders), "open_folders": entered,
            "doctor_names_open_db": bool(named),
            "doctor_fix": named[0]["fix"] if named else None}


def _serve_once(env: dict[str, str], home: Path) -> None:
    """`memcli serve --port` without a token file until it answers, then stopped."""
    import httpx

    port = free_port()
    run = home / "run"
    run.mkdir(mode=0o700, exist_ok=True)
    proc = subprocess.Popen([sys.executable, "-m", "memcli", "serve", "--port", str(port)],
                            env={**env, "XDG_RUNTIME_DIR": str(run)}, cwd=home,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code < 500:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
    finally:
        stop(proc)


def _login(client: Any, token: str) -> int:
    page = client.get("/ui/login")
    found = _CSRF.search(page.text)
    data = {"token": token, "csrf": found.group(1) if found else ""}
    r = client.post("/ui/login", data=data, headers={"Origin": str(client.base_url)})
    return r.status_code


def login_flood(serve: Serve) -> dict[str, Any]:
    import httpx

    with httpx.Client(base_url=serve.url, timeout=60, follow_redirects=False) as operator:
        logged = _login(operator, OPERATOR)
        before = operator.get("/ui/").status_code
        t0 = time.monotonic()
        with httpx.Client(base_url=serve.url, timeout=60) as anon:
            for _ in range(FLOOD):
                anon.cookies.clear()
                anon.get("/ui/login")
        flood_s = time.monotonic() - t0
        after = operator.get("/ui/").status_code
    with httpx.Client(base_url=serve.url, timeout=60, follow_redirects=False) as guesser:
        answers = [_login(guesser, f"guess-{i:04d}-0123456789abcdef") for i in range(GUESSES)]
        right = _login(guesser, OPERATOR)
    return {"login": logged, "operator_before": before, "flood": FLOOD,
            "flood_seconds": round(flood_s, 1), "operator_after": after,
            "logged_out": after != 200,
            "guesses": GUESSES, "guesses_checked": sum(a == 401 for a in answers),
            "guesses_refused": sum(a == 429 for a in answers), "right_token_then": right}
