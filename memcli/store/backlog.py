"""The indexing backlog: memories stored without their vector or sparse terms yet.

The backlog is not a table of its own: a memory is waiting as long as it has no row in
`memory_vectors` (or in `memory_sparse`, when a sparse model is configured), which is what
`memcli embed` looks for too. So nothing is lost when a process indexing it is killed: the rows
are found again by the next one. Read in id order, from a cursor (`after`), so each batch reads
the primary key from where the last one stopped rather than the whole table again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memcli.store.batching import chunks, marks

if TYPE_CHECKING:
    from memcli.store.connection import Database

_LACKS = {
    (True, True): "(v.memory_id IS NULL OR s.memory_id IS NULL)",
    (True, False): "v.memory_id IS NULL",
    (False, True): "s.memory_id IS NULL",
}


def _joins(dense: bool, sparse: bool) -> str:
    return ((" LEFT JOIN memory_vectors v ON v.memory_id = m.id" if dense else "")
            + (" LEFT JOIN memory_sparse s ON s.memory_id = m.id" if sparse else ""))


def _missing(dense: bool, sparse: bool) -> str:
    """The select list's two flags: the row lacks its vector, its sparse terms."""
    return (("v.memory_id IS NULL" if dense else "0 = 1") + ", "
            + ("s.memory_id IS NULL" if sparse else "0 = 1"))


def waiting(db: Database, *, after: int, limit: int, dense: bool, sparse: bool
            ) -> list[tuple[int, str, bool, bool]]:
    """(id, content, lacks a vector, lacks sparse terms) of the next waiting memories with an
    id above `after`, in id order (soft-deleted ones are not indexed, as `memcli embed`)."""
    if not (dense or sparse):
        return []
    rows = db.execute(
        f"SELECT m.id, m.content, {_missing(dense, sparse)} FROM memories m"
        f"{_joins(dense, sparse)} WHERE m.id > ? AND m.state != 'soft_deleted'"
        f" AND {_LACKS[(dense, sparse)]} ORDER BY m.id LIMIT ?", (after, limit))
    return [(int(i), text, bool(v), bool(s)) for i, text, v, s in rows]


def still_waiting(db: Database, ids: list[int], *, dense: bool, sparse: bool
                  ) -> dict[int, tuple[bool, bool]]:
    """Of `ids`, those still stored and waiting: id -> (lacks a vector, lacks sparse terms).
    Read again in the write's transaction: a memory purged, or indexed by another process,
    since it was read is left alone."""
    out: dict[int, tuple[bool, bool]] = {}
    if not (dense or sparse):
        return out
    for part in chunks(ids, 500):
        for i, v, s in db.execute(
                f"SELECT m.id, {_missing(dense, sparse)} FROM memories m{_joins(dense, sparse)}"
                f" WHERE m.id IN ({marks(part)}) AND {_LACKS[(dense, sparse)]}", part):
            out[int(i)] = (bool(v), bool(s))
    return out


def indexed_up_to(db: Database, *, dense: bool, sparse: bool) -> dict[str, int]:
    """The highest memory id with a vector ("dense") and with sparse terms ("sparse"), 0 when
    none has: a memory above it has none yet. Read before a query's dense and sparse legs run,
    it says which memories they could not see (primary-key ends, no scan)."""
    out: dict[str, int] = {}
    for leg, table, wanted in (("dense", "memory_vectors", dense),
                               ("sparse", "memory_sparse", sparse)):
        if wanted:
            out[leg] = int(db.scalar(f"SELECT coalesce(max(memory_id), 0) FROM {table}") or 0)
    return out


def summary(db: Database, *, dense: bool, sparse: bool) -> dict[str, Any]:
    """How many memories wait, and when the oldest of them was written (None: none waits)."""
    if not (dense or sparse):
        return {"waiting": 0, "oldest_at": None}
    count, oldest = next(iter(db.execute(
        f"SELECT count(*), min(m.created_at) FROM memories m{_joins(dense, sparse)}"
        f" WHERE m.state != 'soft_deleted' AND {_LACKS[(dense, sparse)]}")))
    return {"waiting": int(count or 0), "oldest_at": oldest}
