"""sqlite-vec: the vec0 table (binary-quantized prefilter), exact float copies, the dense legs.

`vec_memories` holds one bit vector per memory (sign of each dimension), partitioned by the
memory's (tenant, user) and tagged with its tenant. A KNN over the bits of one user's partition
takes ~2 ms at 100k memories, over one tenant's ~40 ms (metadata filter), so it serves as the
prefilter; the shortlist is then reranked exactly against the float32 copies in
`memory_vectors`. The table is derived: it is rebuilt from `memory_vectors` whenever its layout
is older than this code (see `ensure_vec_table`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memcli.store.batching import chunks, marks
from memcli.store.orphans import delete_lacking, ids_lacking, lacking
from memcli.store.search_sql import count_candidates

if TYPE_CHECKING:
    from memcli.store.filters import Filters
    from memcli.store.sqlite.connection import Database


# Above this many candidate rows the dense leg uses the bit-quantized prefilter instead of an
# exact scan (an exact cosine over a few thousand float vectors costs a couple of ms).
EXACT_SCAN_MAX = 4000
# Within one user's vec0 partition the bit KNN is cheap (~2 ms), so it takes over sooner.
PARTITION_EXACT_MAX = 1000
PREFILTER_FACTOR = 2  # the bit KNN shortlists this many times `limit` for the exact rerank

# Set when vectors change while sqlite-vec is not loaded: vec_memories then lags memory_vectors
# (missing rows, or rows of purged memories) until a connection with sqlite-vec syncs it.
VEC_STALE = "vec_index_stale"
# Small chunks: every (tenant, user) partition allocates at least one chunk of this many slots,
# and a scan over a tenant measured faster with 128 than with vec0's default of 1024.
CHUNK_SIZE = 128
_LAYOUT_MARK = "user_key text partition key"


def user_key(tenant_id: str | None, user_id: str | None) -> str:
    """The partition key of a (tenant, user) pair: exact, no hashing (unit separator)."""
    return f"{tenant_id or ''}\x1f{user_id or ''}"


def _vec_sql(db: Database) -> str | None:
    return db.scalar("SELECT sql FROM sqlite_schema WHERE name = 'vec_memories'")


def _has_vec_table(db: Database) -> bool:
    return _vec_sql(db) is not None


_FLOAT_COPY = ("vec_memories.memory_id", "memory_vectors", "memory_id")


def vector_orphans(db: Database) -> list[int]:
    """Bit vectors whose float copy is gone (readable only with sqlite-vec loaded)."""
    if not (db.vec_enabled and _has_vec_table(db)):
        return []
    return ids_lacking(db, "vec_memories", _FLOAT_COPY)


def ensure_vec_table(db: Database, dimension: int) -> None:
    if not db.vec_enabled:
        return
    current = _vec_sql(db)
    if current is not None and _LAYOUT_MARK in current:
        return
    with db.transaction():
        if current is not None:
            db.execute("DROP TABLE vec_memories")  # an older layout: rebuilt below
        db.execute(
            "CREATE VIRTUAL TABLE vec_memories USING vec0("
            f"memory_id INTEGER PRIMARY KEY, embedding bit[{int(dimension)}], "
            f"{_LAYOUT_MARK}, tenant_key text, chunk_size={CHUNK_SIZE})"
        )
    # Vectors stored while sqlite-vec was missing (or under the old layout) get bit copies now.
    sync_vec_index(db)


_INSERT_VEC = (
    "INSERT INTO vec_memories (memory_id, embedding, user_key, tenant_key)"
    " VALUES (?, vec_quantize_binary(?), ?, ?)"
)


def _with_keys(db: Database, rows: list[tuple[int, bytes]]) -> list[tuple]:
    if not rows:
        return []
    ids = [mid for mid, _ in rows]
    scopes = {}
    for part in chunks(ids, 500):
        scopes.update((mid, (tenant, user)) for mid, tenant, user in db.execute(
            f"SELECT id, tenant_id, user_id FROM memories WHERE id IN ({marks(part)})", part))
    out = []
    for mid, blob in rows:
        tenant, user = scopes.get(mid, (None, None))
        out.append((mid, blob, user_key(tenant, user), tenant or ""))
    return out


def sync_vec_index(db: Database) -> None:
    """Make vec_memories hold exactly the memories of memory_vectors (after writes without vec)."""
    if not db.vec_enabled:
        return
    with db.transaction():
        if _has_vec_table(db):
            delete_lacking(db, "vec_memories", _FLOAT_COPY)
            # Row by row: INSERT ... SELECT would drop the bit subtype vec_quantize_binary sets.
            missing = list(db.execute(
                "SELECT memory_id, embedding FROM memory_vectors WHERE "
                + lacking("memory_vectors.memory_id", "vec_memories", "memory_id")))
            db.executemany(_INSERT_VEC, _with_keys(db, missing))
        db.execute("DELETE FROM meta WHERE key = ?", (VEC_STALE,))


def rebuild_index(db: Database, dimension: int) -> None:
    """Drop the bit index and fill it again from memory_vectors."""
    if not db.vec_enabled:
        # A vec0 table can only be written with sqlite-vec loaded: the next connection that
        # has it syncs the index (`sync_vec_index`).
        if _has_vec_table(db):
            db.set_meta(VEC_STALE, "1")
        return
    db.execute("DROP TABLE IF EXISTS vec_memories")
    ensure_vec_table(db, dimension)


def reset_vectors(db: Database, dimension: int) -> None:
    """Drop every vector and the bit index, and make the index again for `dimension`."""
    db.execute("DELETE FROM memory_vectors")
    db.execute("DROP TABLE IF EXISTS vec_memories")
    ensure_vec_table(db, dimension)


def insert_vectors(db: Database, rows: list[tuple[int, bytes]]) -> None:
    """rows: (memory_id, float32 blob)."""
    db.executemany(
        "INSERT INTO memory_vectors (memory_id, embedding) VALUES (?, ?)"
        " ON CONFLICT (memory_id) DO UPDATE SET embedding = excluded.embedding", rows
    )
    if db.vec_enabled:
        for part in chunks(rows, 500):
            keyed = _with_keys(db, part)
            # vec0 has no INSERT OR REPLACE: a re-embedded memory's old bits go first.
            db.execute(f"DELETE FROM vec_memories WHERE memory_id IN ({marks(keyed)})",
                       [r[0] for r in keyed])
            db.executemany(_INSERT_VEC, keyed)
    elif rows:
        db.set_meta(VEC_STALE, "1")


def delete_vectors(db: Database, ids: list[int]) -> None:
    if not ids:
        return
    in_list = marks(ids)
    db.execute(f"DELETE FROM memory_vectors WHERE memory_id IN ({in_list})", ids)
    if not _has_vec_table(db):
        return
    if db.vec_enabled:
        db.execute(f"DELETE FROM vec_memories WHERE memory_id IN ({in_list})", ids)
    else:
        db.set_meta(VEC_STALE, "1")  # vec0 rows can only be deleted with the module loaded


# -- legs ----------------------------------------------------------------------------------------
def dense(db: Database, vector: bytes, filters: Filters, limit: int,
          scope_rows: int | None = None) -> list[tuple[int, float]]:
    """Cosine similarity (1 - distance): an exact scan on small scopes; on large ones a KNN over
    the bit vectors (within the user's partition, or the tenant's rows) shortlists
    `PREFILTER_FACTOR * limit` memories for the exact rerank.

    `scope_rows`: an upper bound of the memories passing the filters, if the caller has one
    (small enough means an exact scan without counting again)."""
    where, params = filters.sql()
    if not db.vec_enabled:
        return []
    in_partition = filters.user_id is not None and filters.tenant_id is not None
    exact_max = PARTITION_EXACT_MAX if in_partition else EXACT_SCAN_MAX
    if scope_rows is None or scope_rows > exact_max:
        # `scope_rows` may be an upper bound (estimate_scope): the prefilter is only worth it,
        # and only safe for recall, when many memories really pass every filter.
        scope_rows = count_candidates(db, filters, cap=exact_max)
    if scope_rows > exact_max and _has_vec_table(db):
        knn = "embedding MATCH vec_quantize_binary(?) AND k = ?"
        knn_params: list = [vector, PREFILTER_FACTOR * limit]
        if in_partition:
            knn += " AND user_key = ?"
            knn_params.append(user_key(filters.tenant_id, filters.user_id))
        elif filters.tenant_id is not None:
            knn += " AND tenant_key = ?"
            knn_params.append(filters.tenant_id)
        rows = db.execute(
            f"""WITH short AS (SELECT memory_id FROM vec_memories WHERE {knn})
                SELECT m.id, 1.0 - vec_distance_cosine(v.embedding, ?) AS s
                FROM short JOIN memories m ON m.id = short.memory_id
                JOIN memory_vectors v ON v.memory_id = m.id
                WHERE {where} ORDER BY s DESC, m.id LIMIT ?""",
            [*knn_params, vector, *params, limit],
        )
    else:
        rows = db.execute(
            f"SELECT m.id, 1.0 - vec_distance_cosine(v.embedding, ?) AS s FROM memories m"
            f" JOIN memory_vectors v ON v.memory_id = m.id WHERE {where}"
            f" ORDER BY s DESC, m.id LIMIT ?",
            [vector, *params, limit],
        )
    return [(int(i), float(s)) for i, s in rows]


def semantic_neighbours(db: Database, memory_id: int, vector: bytes, tenant_id: str,
                        user_id: str | None, kinds: tuple[str, ...], k: int
                        ) -> list[tuple[int, float]]:
    if not db.vec_enabled:
        return []
    # m.id breaks ties (equal vectors): the oldest, not the scan's order, on both engines
    rows = db.execute(
        f"SELECT m.id, 1.0 - vec_distance_cosine(v.embedding, ?) AS s FROM memories m"
        f" JOIN memory_vectors v ON v.memory_id = m.id"
        " WHERE m.id != ? AND m.tenant_id = ? AND m.user_id IS NOT DISTINCT FROM ? AND m.state ="
        " 'active'"
        f" AND m.kind IN ({marks(kinds)}) ORDER BY s DESC, m.id LIMIT ?",
        [vector, memory_id, tenant_id, user_id, *kinds, k],
    )
    return [(int(i), float(s)) for i, s in rows]
