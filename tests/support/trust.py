"""Shared by the stress and crash suites: real `memcli` processes, and a check of the database.

Every process is started through `Procs`, which kills and reaps whatever is still running when
its block ends, so a failing test leaves nothing behind. `check_database` opens the file the way
memcli does (sqlite-vec loaded) and lists every broken promise: integrity, an event without its
memories (or the reverse), a memory without its index rows, an index row without its memory.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
# Full-text, trigram, dense and entity legs; no SPLADE (the short suites' processes would
# spend most of their time loading it). The full runs use the default models.
NO_SPARSE = ("retrieval:\n  leg_weights: {lexical: 1.0, sparse: 0.0, dense: 1.0, entity: 0.5,"
             " trigram: 0.5}\n")
# What no test's memcli sees from the shell that ran pytest (conftest's isolated_env unsets
# them for each test; memcli_env leaves them out too, so a process started by a fixture that
# outlives one test gets the same environment): credentials, and the terminal's width and
# colours, which rich's text output follows.
UNSET = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "COLUMNS", "LINES", "FORCE_COLOR", "TTY_COMPATIBLE",
         "TTY_INTERACTIVE")


def memcli_env(home: Path, db: Path, *, models: str = "hash") -> dict[str, str]:
    """The environment of a memcli process: its own home and config, `db` as MEMCLI_DB.
    `models`: "hash" (hash embedder, no SPLADE) or "default" (e5-small + SPLADE)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("MEMCLI_") and k not in UNSET}
    env.update(HOME=str(home), XDG_DATA_HOME=str(home / "data"),
               XDG_CONFIG_HOME=str(home / "config"), MEMCLI_DB=str(db),
               MEMCLI_AUTOSTART="0",  # no daemon starts by itself (tests/conftest.py)
               OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    if models == "hash":
        config = home / "memcli.yaml"
        home.mkdir(parents=True, exist_ok=True)
        config.write_text(NO_SPARSE)
        env.update(MEMCLI_EMBEDDER="hash", MEMCLI_CONFIG=str(config))
    return env


class Procs:
    """Start memcli processes; on leaving the block, kill and reap any still running."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self._live: set[subprocess.Popen] = set()
        self._lock = threading.Lock()

    def __enter__(self) -> Procs:
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            live = list(self._live)
        for proc in live:
            if proc.poll() is None:
                proc.kill()
        for proc in live:
            proc.wait()

    def start(self, *args: str) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-m", "memcli", *args], cwd=ROOT, env=self.env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        with self._lock:
            self._live.add(proc)
        return proc

    def finish(self, proc: subprocess.Popen, timeout: float = 300) -> tuple[int, str, str]:
        """Wait for a process (killed after `timeout` s); returns (exit code, stdout, stderr)."""
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        with self._lock:
            self._live.discard(proc)
        return proc.returncode, out, err

    def run(self, *args: str, timeout: float = 300) -> tuple[int, str, str]:
        return self.finish(self.start(*args), timeout)

    def kill9(self, proc: subprocess.Popen) -> int:
        """SIGKILL (no clean-up of any kind in the process), then reap it."""
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        code, _, _ = self.finish(proc)
        return code


def marker(n: int) -> str:
    return f"mk{n:05d}x"


def record(n: int, *, with_id: bool = True, session: str | None = None) -> dict[str, Any]:
    """Logical event `n`: the same content, scope and time wherever it is written, so a repeat
    is caught by its event id or, without one, by its content hash."""
    words = ("Alice", "Bob", "Priya", "Berlin", "Lisbon", "tea", "coffee", "the roadmap")
    text = (f"Note {marker(n)}: {words[n % len(words)]} met {words[(n * 3 + 1) % len(words)]}"
            f" about item {n} on day {n % 28 + 1}.")
    session = session or f"s{n % 7}"
    rec: dict[str, Any] = {
        # A session belongs to one user (ingest refuses another user's session id).
        "session_id": session, "user_id": f"u{sum(map(ord, session)) % 3}",
        "ts": f"2025-03-{n % 28 + 1:02d}T{n % 24:02d}:{n % 60:02d}:00Z",
        "content": {"text": text},
    }
    if with_id:
        rec["event_id"] = f"ev{n:05d}"
    return rec


def write_batch(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _open(db: Path):
    from memcli.store.sqlite.connection import Database

    return Database(db, readonly=True)


def stored_events(db: Path) -> dict[str, str]:
    """event id -> the marker found in its content (or '' if none)."""
    conn = _open(db)
    try:
        out = {}
        for event_id, content in conn.execute("SELECT event_id, content FROM events"):
            text = json.loads(content).get("text", "")
            start = text.find("mk")
            out[event_id] = text[start:start + 8] if start >= 0 else ""
        return out
    finally:
        conn.close()


def check_database(db: Path, *, vectors: bool = True, sparse: bool = False) -> list[str]:
    """Every broken invariant, in words (empty: the database is sound)."""
    conn = _open(db)
    problems: list[str] = []

    def ids(sql: str) -> set:
        return {row[0] for row in conn.execute(sql)}

    def compare(name: str, have: set, want: set) -> None:
        if have - want:
            problems.append(f"{name}: {len(have - want)} rows without a memory, e.g. "
                            f"{sorted(have - want)[:3]}")
        if want - have:
            problems.append(f"{name}: {len(want - have)} memories without a row, e.g. "
                            f"{sorted(want - have)[:3]}")

    try:
        integrity = [r[0] for r in conn.execute("PRAGMA integrity_check")]
        if integrity != ["ok"]:
            problems.append(f"integrity_check: {integrity[:3]}")
        memories = ids("SELECT id FROM memories")
        compare("memories_fts", ids("SELECT rowid FROM memories_fts"), memories)
        compare("memories_trigram", ids("SELECT rowid FROM memories_trigram"), memories)
        if vectors:
            compare("memory_vectors", ids("SELECT memory_id FROM memory_vectors"), memories)
            if conn.vec_enabled:
                compare("vec_memories", ids("SELECT memory_id FROM vec_memories"), memories)
        if sparse:
            compare("memory_sparse", ids("SELECT memory_id FROM memory_sparse"), memories)
        compare("sparse_postings", ids("SELECT DISTINCT memory_id FROM sparse_postings"),
                ids("SELECT memory_id FROM memory_sparse"))
        wrong_df = conn.scalar(
            "SELECT count(*) FROM sparse_df d LEFT JOIN (SELECT term_id, count(*) AS n"
            " FROM sparse_postings GROUP BY term_id) p USING (term_id)"
            " WHERE d.df != coalesce(p.n, 0)")
        if wrong_df:
            problems.append(f"sparse_df: {wrong_df} terms with a wrong document frequency")
        # An event and its episodes land (or go) together.
        events = ids("SELECT event_id FROM events WHERE sensitivity != 'secret'")
        with_episodes = ids("SELECT DISTINCT event_id FROM memories WHERE kind = 'episode'")
        if events - with_episodes:
            problems.append(f"{len(events - with_episodes)} events without their memories, "
                            f"e.g. {sorted(events - with_episodes)[:3]}")
        all_events = ids("SELECT event_id FROM events")
        if with_episodes - all_events:
            problems.append(f"{len(with_episodes - all_events)} episodes without their event")
        no_history = conn.scalar(
            "SELECT count(*) FROM memories m WHERE NOT EXISTS"
            " (SELECT 1 FROM history h WHERE h.memory_id = m.id AND h.op = 'ADD')")
        if no_history:
            problems.append(f"{no_history} memories without their ADD history row")
        repeated = conn.scalar("SELECT count(*) - count(DISTINCT content_hash) FROM events")
        if repeated:
            problems.append(f"{repeated} events repeat a stored content hash")
    finally:
        conn.close()
    return problems


def wait_all(threads: list[threading.Thread], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
