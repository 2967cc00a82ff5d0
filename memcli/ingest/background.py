"""Vectors later: what ingest does when a `memcli serve` indexes in the background.

Inside the daemon (the commands it runs, its HTTP and MCP routes) ingest commits the events,
memories and full-text rows, wakes the daemon's indexer (memcli/service/daemon/indexer.py) and
answers; the indexer then writes the dense vectors and sparse terms, oldest memory first. The queue
is the database itself (memcli/store/backlog.py: the memories without a vector), so a daemon killed
with a backlog loses nothing: the next one finds the rows again, as `memcli embed` does.
Meanwhile the lexical, trigram and entity legs already find the new memories.

Outside a daemon nothing changes: ingest computes the vectors before it writes.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memcli.core.locations import is_postgres
from memcli.providers.passes import encode_both
from memcli.store import backlog
from memcli.store import sparse as sparse_sql
from memcli.store import vectors as vec
from memcli.store.sessions import unseen_sessions

if TYPE_CHECKING:
    from collections.abc import Iterable

    from memcli.ingest.write import Prepared
    from memcli.providers.embedders import Embedder
    from memcli.providers.splade import SpladeEncoder
    from memcli.store.connection import Database

WAIT_STEP = 0.05  # seconds between two looks of `ingest --wait` at its memories


@dataclass
class Queue:
    """The daemon's indexer as its forks see it, for one database: where the database is, the
    pipe that wakes the indexer (its supervisor forks one when none runs), the daemon's pid."""

    location: str
    wake: int
    daemon: int = 0

    def serves(self, db: Database) -> bool:
        return where(getattr(db, "location", None) or db.path) == self.location

    def notify(self, starts: Iterable[tuple[str, str]] = ()) -> None:
        """Wake the indexer for this database: `W<location>`, and `C<location>\t[tenant, user]`
        per user whose new session started. Never blocks: each line is written whole or not at
        all (at most PIPE_BUF bytes); a line dropped on a full pipe (over a thousand unread)
        is found again by the next ingest into the database, or when the daemon opens it again
        (`Supervisor.check`); a dropped session start is consolidated by the next run that
        finds it pending."""
        place = self.location.encode()
        lines = [b"W" + place + b"\n"] + [
            b"C" + place + b"\t" + json.dumps(list(s)).encode() + b"\n" for s in starts]
        for line in lines:
            if len(line) > select.PIPE_BUF:
                continue
            with contextlib.suppress(OSError):  # BlockingIOError: full; BrokenPipeError: gone
                os.write(self.wake, line)

    def alive(self) -> bool:
        """Whether the daemon that indexes is there and still reads the wake pipe (it forks an
        indexer when woken): not once it is stopping (its supervisor closed the read end)."""
        if self.daemon <= 0:
            return False
        poll = select.poll()
        poll.register(self.wake, select.POLLOUT)
        if any(events & select.POLLERR for _fd, events in poll.poll(0)):
            return False  # no reader left: the daemon is stopping or gone
        try:
            os.kill(self.daemon, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


@dataclass
class _Installed:
    wake: int
    daemon: int
    only: str | None  # the one database a per-database daemon indexes; None: any


_INSTALLED: _Installed | None = None


def where(location: str) -> str:
    """A database as two processes can compare it: a file's real path, a server's URL."""

    text = os.fspath(location)
    return text if is_postgres(text) or text == ":memory:" else os.path.realpath(text)


def install(wake: int, *, only: str | None = None) -> None:
    """Ingest into a database (`only`: that one, else any file or server) leaves vectors to
    the indexer woken through `wake`. The daemon calls this before it forks, so its commands
    and its HTTP process inherit it."""
    global _INSTALLED
    _INSTALLED = _Installed(wake, os.getpid(), None if only is None else where(only))


def uninstall() -> None:
    global _INSTALLED
    _INSTALLED = None


def installed() -> bool:
    return _INSTALLED is not None


def queued(location: str) -> str | None:
    """The database as the wake lines name it when ingest into it, in this process, leaves
    its vectors to a daemon's indexer; else None."""
    found = _INSTALLED
    if found is None:
        return None
    place = where(location)
    if place == ":memory:" or "\n" in place or "\t" in place:
        return None  # no other process can open it, or no wake line can name it
    if found.only is not None and place != found.only:
        return None
    return place


def queue_for(db: Database) -> Queue | None:
    """The daemon's queue when ingest into `db` runs inside a daemon that indexes it."""
    found = _INSTALLED
    place = queued(getattr(db, "location", None) or db.path)
    return None if found is None or place is None else Queue(place, found.wake, found.daemon)


def session_starts(db: Database, fresh: list[Prepared]) -> list[tuple[str, str]]:
    """(tenant, user) of each user whose new session the write of `fresh` starts: the first
    event with a new session id for that user (the SQLite memory extension design's trigger
    for consolidating the sessions before it)."""
    keyed = {(p.record.tenant_id, p.record.session_id): p.record.user_id for p in fresh
             if p.record.session_id is not None and p.record.user_id is not None}
    if not keyed:
        return []
    new = unseen_sessions(db, list(keyed))
    return sorted({(tenant, keyed[(tenant, session)]) for tenant, session in new})


def index_next(db: Database, embedder: Embedder | None, sparse: SpladeEncoder | None, *,
               after: int, limit: int) -> tuple[int, int]:
    """Index the next `limit` waiting memories above id `after`: encode outside any
    transaction, then write in one short one. (memories indexed, the last id read; `after`
    when none waits)."""

    dense, terms = embedder is not None, sparse is not None
    rows = backlog.waiting(db, after=after, limit=limit, dense=dense, sparse=terms)
    if not rows:
        return 0, after
    need_dense = [(i, text) for i, text, lacks, _ in rows if lacks and dense]
    need_sparse = [(i, text) for i, text, _, lacks in rows if lacks and terms]
    matrix, encoded = encode_both(embedder, [t for _, t in need_dense],
                                  sparse, [t for _, t in need_sparse])
    with db.transaction():
        still = backlog.still_waiting(db, [i for i, *_ in rows], dense=dense, sparse=terms)
        if need_sparse and sparse is not None:
            postings = [(i, v) for (i, _), v in zip(need_sparse, encoded, strict=True)
                        if still.get(i, (False, False))[1]]
            if postings:
                sparse_sql.record_vocab(db, sparse.vocab_hash)
                sparse_sql.insert_postings(db, postings)
        if need_dense and matrix is not None:
            vectors = [(i, v.tobytes()) for (i, _), v in zip(need_dense, matrix, strict=True)
                       if still.get(i, (False, False))[0]]
            if vectors:
                vec.insert_vectors(db, vectors)
    return len(rows), rows[-1][0]


def wait_for(db: Database, memory_ids: list[int], queue: Queue, *, dense: bool, sparse: bool,
             catch_up: Any = None) -> None:
    """Return once each of `memory_ids` has its vector and sparse terms (`ingest --wait`).
    Should the daemon be gone, `catch_up()` indexes what is left in this process."""
    todo = list(memory_ids)
    while todo:
        todo = list(backlog.still_waiting(db, todo, dense=dense, sparse=sparse))
        if not todo:
            return
        if not queue.alive():
            if catch_up is not None:
                catch_up()
            return
        time.sleep(WAIT_STEP)
