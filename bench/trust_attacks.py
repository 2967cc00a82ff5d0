"""Attacks on memcli from outside its test suite, counted: what a second local user, another
tenant, a narrowly bound token and a hostile client get.

    python -m bench.trust_attacks            # every attack, ~1,000 fuzzed calls
    python -m bench.trust_attacks --quick    # 200 fuzzed calls
    python -m bench.trust_attacks --json     # the figures (and every leak found) as JSON

What it measures, how, and the results: bench/README.md, "Attacks on trust".
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import trust_attacks_local
from bench.trust_attacks_inputs import fuzz, planted_secrets
from bench.trust_attacks_local import file_modes, login_flood
from bench.trust_attacks_serve import Serve, bindings, memcli, oversized, scratch_env
from tests.support.sockets import Listener, python_of, second_user
from tests.support.trust import memcli_env

BENCH = Path(__file__).resolve().parent

SECRET = "s3cret-token-never-forwarded"
KEY = base64.b64encode(b"k" * 32).decode()
INITIALIZE = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "t", "version": "1"}}}) + "\n"
# route: (arguments, stdin, the endpoint's socket it reaches)
PLANTED_ROUTES = {
    "cli": (["remember", "Alice likes green tea"], "", "socket"),
    "hook": (["hook", "record", "--strict"], json.dumps({"session_id": "s", "prompt": "hi"}),
             "socket"),
    "mcp": (["mcp"], INITIALIZE, "http_socket"),
}


def planted_socket(scratch: Path) -> dict[str, Any]:
    from memcli.service.daemon import paths

    user = second_user()
    if user is None:
        return {"skipped": "needs root and a user `nobody`"}
    result: dict[str, Any] = {"received": 0, "of": 2 * len(PLANTED_ROUTES), "routes": {}}
    for route, (args, stdin, which) in PLANTED_ROUTES.items():
        shared = Path(tempfile.mkdtemp(prefix="memcli-planted-"))
        try:
            os.chmod(shared, 0o1777)  # like /tmp: open to all, sticky
            home = scratch / f"planted-{route}"
            env = memcli_env(home, home / "m.db")
            env.update(XDG_RUNTIME_DIR=str(shared), MEMCLI_KEY=KEY, SECRET_API_TOKEN=SECRET)
            # The user's daemon's name: the socket every command looks for when no daemon
            # was started for its database by hand (and the one the CLI starts).
            name = os.path.basename(getattr(paths.user_endpoint(env), which))
            python = python_of(user, shared)
            if python is None:
                return {"skipped": "no python3 the user `nobody` can run"}
            with Listener(python, shared / "memcli", 0o777, name, user) as listener:
                done = memcli(env, home, *args, stdin=stdin, timeout=60)
            got = b"".join(listener.received)
            secrets = [s for s, v in (("MEMCLI_KEY", KEY), ("SECRET_API_TOKEN", SECRET))
                       if v.encode() in got]
            result["received"] += len(secrets)
            result["routes"][route] = {"secrets": secrets, "bytes": len(got),
                                       "exit": done.returncode,
                                       "stderr": done.stderr.strip()[-200:]}
        finally:
            shutil.rmtree(shared, ignore_errors=True)
    return result


# -- cross-tenant id commands --------------------------------------------------------------
TABLES = ("memories", "history", "decisions", "tasks", "proposals", "checkpoints", "relations",
          "events", "artifacts")
PROPOSAL = """
import sys
from memcli import Memory
from memcli.store.proposals_sql import insert_proposal
with Memory.open(sys.argv[1]) as memory, memory.db.transaction():
    print(insert_proposal(memory.db, {
        "tenant_id": sys.argv[2], "user_id": "priya", "field": "city", "value": "Porto",
        "text": "Priya lives in Porto.", "origin": "consolidate", "status": "pending",
        "created_at": "2025-01-01T00:00:00Z", "expires_at": "2999-01-01T00:00:00Z"}))
"""


class Tenants:
    """The CLI as one tenant or another, on one scratch database."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.env = memcli_env(self.home, self.home / "m.db")
        self.env["MEMCLI_NO_DAEMON"] = "1"
        self.db = self.home / "m.db"

    def run(self, tenant: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess:
        return memcli({**self.env, "MEMCLI_TENANT": tenant}, self.home, *args, stdin=stdin)

    def made(self, tenant: str, *args: str, stdin: str = "") -> Any:
        done = self.run(tenant, *args, "--json", stdin=stdin)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)}: exit {done.returncode}: {done.stderr[-300:]}")
        return json.loads(done.stdout) if done.stdout.strip() else None

    def rows(self, sql: str, params: tuple = ()) -> list[tuple]:
        import apsw

        conn = apsw.Connection(str(self.db), flags=apsw.SQLITE_OPEN_READONLY)
        try:
            return list(conn.execute(sql, params))
        finally:
            conn.close()

    def snapshot(self) -> dict[str, list]:
        found = {r[0] for r in self.rows("SELECT name FROM sqlite_master WHERE type='table'")}
        return {t: sorted(map(repr, self.rows(f"SELECT * FROM {t}"))) for t in TABLES
                if t in found}

    # the rows each command is given, made in `tenant`
    def fact(self, t: str) -> str:
        return str(self.made(t, "remember", f"Quokkas of {t} like tea.")["id"])

    def forgotten(self, t: str) -> str:
        fact = self.fact(t)
        self.made(t, "forget", fact)
        return fact

    def pinned(self, t: str) -> str:
        fact = self.fact(t)
        self.made(t, "pin", fact)
        return fact

    def decision(self, t: str) -> str:
        return str(self.made(t, "decision", "add", "Use SQLite for the store.")["id"])

    def task(self, t: str) -> str:
        return str(self.made(t, "task", "add", "Ship the quokka release")["id"])

    def artifact(self, t: str) -> str:
        record = {"kind": "tool_result", "session_id": "s1", "event_id": f"tool-{t}",
                  "content": {"output": "line of tool output\n" * 5000}}
        self.made(t, "ingest", "-", stdin=json.dumps(record))
        return self.rows("SELECT artifact_id FROM artifacts a JOIN events e ON e.event_id ="
                         " a.event_id WHERE e.tenant_id = ?", (t,))[0][0]

    def artifact_event(self, t: str) -> str:
        record = {"kind": "artifact", "session_id": "s1", "event_id": f"doc-{t}",
                  "text": "the design doc, v3"}
        self.made(t, "ingest", "-", stdin=json.dumps(record))
        return f"doc-{t}"

    def proposal(self, t: str) -> str:
        done = subprocess.run([sys.executable, "-c", PROPOSAL, str(self.db), t], env=self.env,
                              cwd=self.home, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(done.stderr[-300:])
        return done.stdout.strip()

    def checkpoint(self, t: str) -> str:
        self.made(t, "checkpoint", "save", "--user-id", "priya", "--thread-id", f"t-{t}",
                  "--data", '{"step": 3}')
        return f"t-{t}"


# (name, how the row is made, arguments with {id}, writes)
ID_COMMANDS = (
    ("forget", "fact", ("forget", "{id}"), True),
    ("restore", "forgotten", ("restore", "{id}"), True),
    ("pin", "fact", ("pin", "{id}"), True),
    ("unpin", "pinned", ("unpin", "{id}"), True),
    ("confirm", "fact", ("confirm", "{id}"), True),
    ("correct", "fact", ("correct", "{id}", "Quokkas like coffee."), True),
    ("decision supersede", "decision",
     ("decision", "supersede", "{id}", "Use PostgreSQL for the store."), True),
    ("task update", "task", ("task", "update", "{id}", "--status", "done"), True),
    ("proposals accept", "proposal", ("proposals", "accept", "{id}"), True),
    ("proposals reject", "proposal", ("proposals", "reject", "{id}"), True),
    ("related", "fact", ("related", "{id}"), False),
    ("history", "fact", ("history", "{id}"), False),
    ("artifact (tool output)", "artifact", ("artifact", "{id}"), False),
    ("artifact (event)", "artifact_event", ("artifact", "{id}"), False),
    ("checkpoint load", "checkpoint", ("checkpoint", "load", "--user-id", "priya", "--thread-id",
                                       "{id}"), False),
)


def cross_tenant(scratch: Path, owner: str = "acme", intruder: str = "other") -> dict[str, Any]:
    """Each command on a database of its own (remember merges near-duplicates: one shared
    database would hand several commands the same row)."""
    writes, reads, controls_failed, details = 0, 0, 0, {}
    for n, (name, make, args, is_write) in enumerate(ID_COMMANDS):
        cli = Tenants(scratch / f"tenants-{n}")
        try:
            row_id = getattr(cli, make)(owner)
        except (RuntimeError, IndexError, json.JSONDecodeError, KeyError) as exc:
            details[name] = f"not run: the row could not be made ({str(exc)[:120]})"
            continue
        before = cli.snapshot()
        done = cli.run(intruder, *[a.replace("{id}", row_id) for a in args])
        changed = cli.snapshot() != before
        shown = done.returncode == 0 and done.stdout.strip() not in ("", "[]", "{}", "null")
        if is_write and (done.returncode == 0 or changed):
            writes += 1
        elif not is_write and shown:  # an empty answer (`[]`) shows nothing of the row
            reads += 1
        detail = {"exit": done.returncode, "changed": changed,
                  "stdout": done.stdout.strip()[:120], "stderr": done.stderr.strip()[:160]}
        if done.returncode != 0 and not changed:  # refused: the owner's own command must work
            own = cli.run(owner, *[a.replace("{id}", row_id) for a in args])
            controls_failed += own.returncode != 0
            detail["owner_exit"] = own.returncode
        details[name] = detail
    return {"writes_accepted": writes, "writes_of": sum(c[3] for c in ID_COMMANDS),
            "reads_answered": reads, "reads_of": sum(not c[3] for c in ID_COMMANDS),
            "controls_failed": controls_failed, "commands": details}


# -- the run -------------------------------------------------------------------------------
def version() -> dict[str, str]:
    import memcli

    folder = Path(memcli.__file__).resolve().parent
    commit = subprocess.run(["git", "-C", str(folder), "describe", "--always", "--dirty"],
                            capture_output=True, text=True).stdout.strip()
    return {"memcli": str(folder), "version": getattr(memcli, "__version__", "?"),
            "commit": commit or "?"}


def run(quick: bool, calls: int | None, seed: int, only: set[str]) -> dict[str, Any]:
    calls = calls or (200 if quick else 1000)
    out: dict[str, Any] = {**version(), "seed": seed}
    scratch = Path(tempfile.mkdtemp(prefix="memcli-attacks-"))
    try:
        steps = {
            "planted_socket": lambda: planted_socket(scratch),
            "cross_tenant": lambda: cross_tenant(scratch),
            "bindings": lambda: _served(scratch, "bindings", bindings),
            "fuzz": lambda: _served(scratch, "fuzz", lambda s: fuzz(s, calls, seed)),
            "oversized_length": lambda: _served(scratch, "big-length",
                                                lambda s: oversized(s, chunked=False)),
            "oversized_chunked": lambda: _served(scratch, "big-chunked",
                                                 lambda s: oversized(s, chunked=True)),
            "file_modes": lambda: file_modes(scratch),
            "login_flood": lambda: _served(scratch, "login-flood", login_flood),
            **{name: (lambda attack=attack: attack(scratch))
               for name, attack in trust_attacks_local.STEPS.items()},
            "planted_secrets": lambda: planted_secrets(scratch),
        }
        for name, step in steps.items():
            if only and name not in only:
                continue
            t0 = time.monotonic()
            print(f"-- {name}", file=sys.stderr, flush=True)
            out[name] = step()
            out[name]["seconds"] = round(time.monotonic() - t0, 1)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return out


def _served(scratch: Path, name: str, attack: Any) -> dict[str, Any]:
    with Serve(scratch_env(scratch, name), scratch) as serve:
        return attack(serve)


def _yes(key: str) -> Any:
    return lambda r: "yes" if r[key] else "no"


# The summary's rows: (what, the attack, its figure: a format of the attack's result or a
# function of it); the local machine's attacks and the planted secrets come last.
ROWS: tuple[tuple[str, str, Any], ...] = (
    ("planted socket: secret values received", "planted_socket", "{received} of {of}"),
    ("cross-tenant id writes accepted or changed", "cross_tenant",
     "{writes_accepted} of {writes_of}"),
    ("cross-tenant id reads that showed the row", "cross_tenant", "{reads_answered} of {reads_of}"),
    ("binding leaks (outside rows read, changed or listed)", "bindings", "{leaks}"),
    ("requests naming a scope outside the binding: 2xx", "bindings", "{named_scope_accepted}"),
    ("fuzz: HTTP 5xx", "fuzz", "{http_5xx} of {http}"),
    ("fuzz: MCP internal errors", "fuzz", "{mcp_internal} of {mcp}"),
    ("fuzz: tracebacks in the daemon log", "fuzz", "{daemon_tracebacks}"),
    ("RSS growth, 3 x 100 MB POST, Content-Length", "oversized_length", "{growth_mb} MB"),
    ("RSS growth, 3 x 100 MB POST, chunked", "oversized_chunked", "{growth_mb} MB"),
    ("files other local users can read (umask 022)", "file_modes",
     lambda r: f"{len(r['readable_by_others'])} of {r['files']}"),
    ("folders memcli made that others can enter", "file_modes",
     lambda r: f"{len(r['open_folders'])} of {r['folders']}"),
    ("doctor names a database others can read", "file_modes", _yes("doctor_names_open_db")),
    ("10,000 anonymous GET /ui/login: operator logged out", "login_flood", _yes("logged_out")),
    ("wrong tokens checked of 30 posted from one address", "login_flood",
     "{guesses_checked} of {guesses}"),
    *trust_attacks_local.ROWS,
    ("planted secrets found raw (10 write entries)", "planted_secrets",
     lambda r: f"{r['raw']} of {r['of']} ({len(r['raw_kinds'])} kinds; "
               f"{r['failed_writes']} writes failed)"),
)


def table(out: dict[str, Any]) -> str:
    def cell(step: str, figure: Any) -> str:
        if step not in out:
            return "not run"
        result = out[step]
        if "skipped" in result:
            return result["skipped"]
        return figure(result) if callable(figure) else figure.format_map(result)

    rows = [(what, cell(step, figure)) for what, step, figure in ROWS]
    width = max(len(r[0]) for r in rows)
    lines = [f"memcli {out['version']} ({out['commit']}) at {out['memcli']}", ""]
    lines += [f"{what:<{width}}  {value}" for what, value in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--quick", action="store_true", help="200 fuzzed calls, not 1,000")
    parser.add_argument("--calls", type=int, help="fuzzed calls (overrides --quick)")
    parser.add_argument("--seed", type=int, default=23, help="the fuzz's seed")
    parser.add_argument("--only", default="", help="comma-separated attacks: planted_socket,"
                        "cross_tenant,bindings,fuzz,oversized_length,oversized_chunked,file_modes,"
                        "login_flood,planted_secrets," + ",".join(trust_attacks_local.STEPS))
    args = parser.parse_args()
    only = {o.strip() for o in args.only.split(",") if o.strip()}
    out = run(args.quick, args.calls, args.seed, only)
    print(json.dumps(out, indent=2, ensure_ascii=False) if args.json else table(out))


if __name__ == "__main__":
    main()
