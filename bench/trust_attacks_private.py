"""bench/trust_attacks.py's attacks on files others can read and on the pages' login.

File modes: under umask 022 (most systems' default: new files 0644, folders 0755), real
`python -m memcli` commands write a new database in a new folder, an export, a view, the hooks
log and a serve token file; counted are the files another local user can read (any group or
other bit) and the folders memcli made that others can enter. Then a database left 0644 (as
an older memcli or a copy leaves it): does `memcli doctor` name it?

Pages: against a real `memcli serve --port` (bench/trust_attacks_serve.py), the operator logs
in through the login form, then 10,000 anonymous browsers each `GET /ui/login` with no cookie;
is the operator still logged in? Then 30 wrong tokens posted from one address: how many were
checked before the pages refused (429), and does the right token get in while refused?
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.trust_attacks_serve import OPERATOR, Serve, free_port
from tests.support.procs import stop
from tests.support.trust import memcli_env

FLOOD = 10_000
GUESSES = 30
_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def _run(env: dict[str, str], cwd: Path, *args: str, stdin: str = "") -> Any:
    return subprocess.run([sys.executable, "-m", "memcli", *args], input=stdin, env=env,
                          cwd=cwd, capture_output=True, text=True, timeout=300)


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
        _run(env, home, "ingest", "-", stdin=records)
        _run(env, home, "remember", "Priya keeps her passport in the blue folder",
             "--user-id", "priya")
        _run(env, home, "export", "-o", str(home / "export.jsonl"))
        _run(env, home, "view", "export", str(home / "views" / "priya"), "--user-id", "priya")
        _run(env, home, "hook", "record", "--db", str(home), stdin='{"prompt": "hi"}')
        _serve_once(env, home)  # `serve --port` makes the token file before it answers
        _run(env, home, "stats")  # opened again: SQLite makes its WAL and SHM from the file
        files = sorted(p for p in home.rglob("*") if p.is_file()
                       and p.name not in ("memcli.yaml",))
        folders = [db.parent, db.parent.parent, home / "views", home / "views" / "priya"]
        readable = [str(p.relative_to(home)) for p in files if _open(p)]
        entered = [str(p.relative_to(home)) for p in folders if p.exists() and _open(p)]
        # An existing database others can read: named by doctor?
        os.chmod(db, 0o644)
        doctor = _run(env, home, "doctor", "--json")
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
