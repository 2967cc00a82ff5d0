"""Vectors later: what ingest does when a `memcli serve` indexes in the background.

Inside the daemon (the commands it runs, its HTTP and MCP routes) ingest commits the events,
memories and full-text rows, wakes the daemon's indexer (memcli/service/daemon/indexer.py) and
answers; the indexer then writes the dense vectors and sparse terms, oldest memory first. The queue
is the database itself (memcli/store/backlog.py: the memories without a vector), so a daemon killed
with a backlog loses nothing: the next one finds the rows again, as `memcli embed` does.
Meanwhile the lexical, trigram and entity legs already find the new memories.

In the user's daemon, which serves every database, the queue is installed for any database
(`install(None, ...)`) and each wake line names the database it is about.

Outside a daemon nothing changes: ingest computes the vectors before it writes.
"""

from __future__ import annotations

import contextlib
import json
import os
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
    """The daemon's indexer as its forks see it: the database it indexes (None in the user's
    daemon: any database), the pipe that wakes it, its pid. The wake lines name the database:
    `W<location>` (memories wait), `C<location>\t<json [tenant, user]>` (that user started a
    new session)."""

    location: str | None
    wake: int
    indexer: int = 0

    def serves(self, db: Database) -> bool:
        return self.location is None or _where(_location(db)) == self.location

    def notify(self, starts: Iterable[tuple[str, str]] = ()) -> None:
        """Wake the indexer (never blocks: a full pipe means it is awake already; a dropped
        session start is consolidated by the next run that finds it pending)."""
        where = os.fsencode(self.location or "")
        lines = [b"W" + where + b"\n"] + [
            b"C" + where + b"\t" + json.dumps(list(s)).encode() + b"\n" for s in starts]
        with contextlib.suppress(OSError):  # BlockingIOError: full; BrokenPipeError: gone
            os.write(self.wake, b"".join(lines))

    def alive(self) -> bool:
        if self.indexer <= 0:
            return False
        try:
            os.kill(self.indexer, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


_QUEUE: Queue | None = None


def _where(location: str) -> str:
    """A database as two processes can compare it: a file's real path, a server's URL."""

    text = os.fspath(location)
    return text if is_postgres(text) or text == ":memory:" else os.path.realpath(text)


def _location(db: Database) -> str:
    return getattr(db, "location", None) or db.path


def install(location: str | None, wake: int) -> Queue:
    """Ingest into `location` (None: into any database, the user's daemon) leaves vectors to
    the indexer woken through `wake` (the daemon calls this before it forks, so its commands
    and its HTTP process inherit it)."""
    global _QUEUE
    _QUEUE = Queue(None if location is None else _where(location), wake)
    return _QUEUE


def uninstall() -> None:
    global _QUEUE
    _QUEUE = None


def installed() -> Queue | None:
    return _QUEUE


def queue_for(db: Database) -> Queue | None:
    """The daemon's queue when ingest into `db` runs inside the daemon that indexes it, its
    wake lines naming `db`."""
    queue = _QUEUE
    if queue is None or not queue.serves(db):
        return None
    if queue.location is None:
        return Queue(_where(_location(db)), queue.wake, queue.indexer)
    return queue


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
    Should the indexer be gone, `catch_up()` indexes what is left in this process."""
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
