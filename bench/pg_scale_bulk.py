"""The bulk path of bench/pg_scale.py: a base loaded through memcli's ingest, copied to N memories.

Loading 1M events through `Memory.ingest` takes hours here (~2 h SQLite, ~7 h PostgreSQL at the
50k run's rates), so `--bulk-base B` ingests B events as the normal load does (8 writers, the
real write path), then writes copies 1..K-1 of every row that ingest wrote, with the same
columns filled, until the database holds `--events` memories:

- per memory: `events`, `memories` (PostgreSQL's `context` column and generated `fts`), `history`,
  `memory_entities` (+ new `entities` / `entity_aliases`), `memory_sparse` (PostgreSQL: the
  SPLADE sparsevec), `sparse_postings` (SQLite), `memory_vectors`; per session: `sessions`,
  `threads`, `change_log`; `sparse_df` = base df x K (PostgreSQL: its trigger counts the copies).
- copy c: ids offset by c x the base's largest (memory id, event seq, history and change_log
  ids), new event ids and real content hashes (memcli's own formula, checked on the base), new
  sessions (`c<c>...`), users moved by a multiple of 8 (a user stays in its tenant: 1,000 users
  in 8 tenants), times shifted by c x the base's time span, and the corpus's proper nouns
  (names, places, projects) replaced by copy-specific made-up words, so that rare terms keep
  a base-like document frequency and the vocabulary and entities grow with the size (the
  common words repeat, with the same df/N as in the base). Entities are extracted again from
  the new text by memcli's extractor. Vectors: the base memory's vector plus noise (sd 0.015,
  normalised, as bench/perf.py's large database); SPLADE postings: the base memory's.
- indexes built after the load where the engine allows it: PostgreSQL's secondary indexes and
  the HNSW index are dropped first and created again from their own
  definitions afterwards; SQLite's FTS5 tables are rebuilt by memcli's `rebuild_lexical` and
  the vec0 table by the backend's `rebuild_vectors` (both memcli's own code for `rebuild`).

bench/pg_scale_check.py checks the result.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import time
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Any

import numpy as np

SHIFT_STEP = 37  # users move by 8 x (c * 37 mod 125): distinct for c < 125, tenant kept
PER_USER_TABLES = ("events", "memories", "history", "memory_vectors", "memory_sparse",
                   "memory_entities", "sessions", "threads", "change_log")
# lexeme_df and lexical_stats (PostgreSQL's BM25 statistics) are kept by statement triggers on
# memories, which COPY fires as INSERT does
HANDLED = set(PER_USER_TABLES) | {"meta", "sparse_postings", "sparse_df", "entities",
                                  "entity_aliases", "request_metrics", "run_locks", "lexeme_df",
                                  "lexical_stats"}
# (memory_sparse: its GIN index over (tenant_id, term ids), schema 6; its primary key stays)
PG_DEFERRED = ("events", "memories", "history", "memory_vectors", "memory_entities",
               "change_log", "sessions", "memory_sparse")


def log(msg: str) -> None:
    import sys

    print(f"[pg_scale_bulk {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- copy c's values


class Copier:
    """The value maps of one copy (ids, users, sessions, times, text)."""

    def __init__(self, c: int, base: Base) -> None:
        self.c, self.base = c, base
        self.shift = timedelta(seconds=base.span * c)
        self.user_shift = 8 * ((c * SHIFT_STEP) % 125)
        rng = random.Random(f"words-{c}")
        self.words = {w: _made_up(rng, w) for w in base.nouns}
        self.pattern = base.noun_pattern

    def user(self, u: str | None) -> str | None:
        if u is None or not re.fullmatch(r"u\d{4}", u):
            return u
        return f"u{(int(u[1:]) + self.user_shift) % 1000:04d}"

    def session(self, s: str | None) -> str | None:
        return None if s is None else f"c{self.c}{s[2:]}" if s.startswith("c0") \
            else f"k{self.c}-{s}"

    def event_id(self, e: str | None) -> str | None:
        if e is None:
            return None
        return "evt_" + hashlib.blake2b(f"{e}/{self.c}".encode(), digest_size=16).hexdigest()

    def ts(self, t: str | None) -> str | None:
        if t is None:
            return None
        return (_parse(t) + self.shift).strftime(  # in the stored format
            "%Y-%m-%dT%H:%M:%S.%fZ" if "." in t else "%Y-%m-%dT%H:%M:%SZ")

    def text(self, text: str | None) -> str | None:
        if not text:
            return text
        return self.pattern.sub(lambda m: self.words[m.group(0)], text)

    def actor(self, row: dict[str, Any]) -> str | None:
        return self.user(row["actor_id"]) if row.get("actor_type") == "human" else row["actor_id"]


def _parse(t: str) -> datetime:
    return datetime.fromisoformat(t.replace("Z", "+00:00"))


def _made_up(rng: random.Random, word: str) -> str:
    """A pronounceable made-up word in the original's case (a copy's own name or place)."""
    syll = ("ka", "lo", "mi", "ren", "ta", "vo", "si", "dar", "ne", "bu", "el", "zor", "qui",
            "fa", "ho", "lin", "pe", "ru", "sha", "to", "wen", "ya", "gri", "mos")
    new = "".join(rng.choice(syll) for _ in range(rng.randint(2, 3)))
    return new.capitalize() if word[:1].isupper() else new


def content_hash(row: dict[str, Any], content: dict[str, Any]) -> str:
    """memcli's content hash of an event row (ingest._content_hash, on the stored fields)."""
    from memcli.ingest.prepare import _content_hash

    rec = SimpleNamespace(tenant_id=row["tenant_id"], user_id=row["user_id"],
                          agent_id=row["agent_id"], session_id=row["session_id"],
                          app_id=row["app_id"], run_id=row["run_id"], channel=row["channel"],
                          actor=SimpleNamespace(type=row["actor_type"], id=row["actor_id"]),
                          kind=row["kind"], ts=row["ts"])
    return _content_hash(rec, content)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- the base


class Base:
    """What ingest wrote for the base events, read once (small: the base is a few 10k rows)."""

    def __init__(self, db: Any, engine: str) -> None:
        self.engine = engine
        tables = _tables(db, engine)
        stray = [t for t in tables if t not in HANDLED and _count(db, t) and
                 not t.startswith(("memories_fts", "memories_trigram", "vec_memories"))]
        if stray:
            raise SystemExit(f"bulk: ingest wrote rows to {stray}, which the copy does not know")
        self.rows = {t: db.query(f"SELECT * FROM {t}") for t in PER_USER_TABLES
                     if t != "memory_vectors"}
        generated = _generated(db, engine)  # PostgreSQL's fts, fts_tokens: computed by it
        for table, rows in self.rows.items():
            self.rows[table] = [{k: v for k, v in r.items() if (table, k) not in generated}
                                for r in rows]
        self.max_id = {"memories": _max(db, "memories", "id"), "events": _max(db, "events", "seq"),
                       "history": _max(db, "history", "id"),
                       "change_log": _max(db, "change_log", "id")}
        self.vectors = _vectors(db, engine)
        # SQLite's posting rows; PostgreSQL's sparsevec rows (one per memory)
        self.postings = _count(db, "sparse_postings" if engine == "sqlite"
                               else "memory_sparse")
        stamps = [_parse(r["ts"]) for r in self.rows["events"]]
        self.span = (max(stamps) - min(stamps)).total_seconds() + 86400
        from bench import perf

        nouns = set(perf.NAMES) | set(perf.PLACES) | set(perf.PROJECTS)
        nouns |= {n.lower() for n in nouns} | {n.capitalize() for n in nouns}
        self.nouns = sorted(nouns)
        self.noun_pattern = re.compile(r"\b(" + "|".join(map(re.escape, self.nouns)) + r")\b")
        self.memory_text = {r["id"]: r["content"] for r in self.rows["memories"]}
        if any(r["chunk_index"] for r in self.rows["memories"]):  # new text, new chunking
            raise SystemExit("bulk: an event of the base has more than one chunk")
        for row in self.rows["events"][:200]:  # the formula is memcli's: prove it on the base
            if row["sensitivity"] != "secret" and content_hash(
                    row, json.loads(row["content"])) != row["content_hash"]:
                raise SystemExit("bulk: recomputed content hash differs from the stored one")


def _tables(db: Any, engine: str) -> list[str]:
    if engine == "sqlite":
        return [r["name"] for r in db.query(
            "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            " AND sql NOT LIKE 'CREATE VIRTUAL%'")]
    return [r["tablename"] for r in db.query(
        "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")]


def _generated(db: Any, engine: str) -> set[tuple[str, str]]:
    if engine == "sqlite":
        return set()
    return {(r["table_name"], r["column_name"]) for r in db.query(
        "SELECT table_name, column_name FROM information_schema.columns"
        " WHERE table_schema = current_schema() AND is_generated = 'ALWAYS'")}


def _count(db: Any, table: str) -> int:
    return int(db.scalar(f"SELECT count(*) FROM {table}"))


def _max(db: Any, table: str, column: str) -> int:
    return int(db.scalar(f"SELECT coalesce(max({column}), 0) FROM {table}"))


def _vectors(db: Any, engine: str) -> dict[int, np.ndarray]:
    if engine == "sqlite":
        return {int(r["memory_id"]): np.frombuffer(r["embedding"], dtype=np.float32)
                for r in db.query("SELECT memory_id, embedding FROM memory_vectors")}
    return {int(r["memory_id"]): np.asarray(json.loads(r["v"]), dtype=np.float32)
            for r in db.query("SELECT memory_id, embedding::text AS v FROM memory_vectors")}


# ----------------------------------------------------------------------------- one copy's rows


def copy_rows(base: Base, c: int, now: str, entities: dict[tuple[str, str, str], int],
              new_entities: list[tuple], new_aliases: list[tuple], aliases: set[tuple]
              ) -> dict[str, list[dict[str, Any]]]:
    from memcli.core.chunking import estimate_tokens
    from memcli.entities.extraction import extract_entities

    k = Copier(c, base)
    dm, de = c * base.max_id["memories"], c * base.max_id["events"]
    dh, dc = c * base.max_id["history"], c * base.max_id["change_log"]
    out: dict[str, list[dict[str, Any]]] = {t: [] for t in PER_USER_TABLES}
    for r in base.rows["events"]:
        row = {**r, "seq": r["seq"] + de, "event_id": k.event_id(r["event_id"]),
               "ts": k.ts(r["ts"]), "user_id": k.user(r["user_id"]),
               "session_id": k.session(r["session_id"]), "actor_id": k.actor(r),
               "content": k.text(r["content"])}
        if r["sensitivity"] != "secret":
            row["content_hash"] = content_hash(row, json.loads(row["content"]))
        else:
            row["content_hash"] = hashlib.sha256(f"{r['content_hash']}/{c}".encode()).hexdigest()
        out["events"].append(row)
    top = max(entities.values(), default=0)  # new entities of this copy take ids above it
    for r in base.rows["memories"]:
        row = {**r, "id": r["id"] + dm, "content": k.text(r["content"]),
               "user_id": k.user(r["user_id"]), "session_id": k.session(r["session_id"]),
               "actor_id": k.actor(r), "event_id": k.event_id(r["event_id"]),
               "event_seq": None if r["event_seq"] is None else r["event_seq"] + de,
               "event_time": k.ts(r["event_time"]), "valid_from": k.ts(r["valid_from"]),
               "source_ids": json.dumps([k.event_id(e) for e in json.loads(r["source_ids"])])}
        row["token_count"] = estimate_tokens(row["content"])  # as the chunker sizes it
        if "context" in r:
            row["context"] = k.text(r["context"])
        out["memories"].append(row)
        if r["sensitivity"] == "high":
            continue
        seen = set()
        for ent in extract_entities(row["content"]):  # as mem.link_entities, on the new text
            key = (row["tenant_id"], ent.kind, ent.norm)  # entities are per tenant (schema 3)
            eid = entities.get(key)
            if eid is None:
                top += 1
                eid = entities[key] = top
                new_entities.append((eid, row["tenant_id"], ent.kind, ent.norm, ent.value, now))
            alias = (ent.value.lower(), eid)
            if alias not in aliases:
                aliases.add(alias)
                new_aliases.append(alias)
            if eid not in seen:
                seen.add(eid)
                out["memory_entities"].append({"memory_id": row["id"], "entity_id": eid})
    for r in base.rows["history"]:
        mid = None if r["memory_id"] is None else r["memory_id"] + dm
        out["history"].append({
            **r, "id": r["id"] + dh, "memory_id": mid, "event_id": k.event_id(r["event_id"]),
            "new_ref": str(mid) if r["new_ref"] == str(r["memory_id"]) else r["new_ref"],
            "user_id": k.user(r["user_id"]), "session_id": k.session(r["session_id"])})
    for r in base.rows["memory_sparse"]:
        out["memory_sparse"].append({**r, "memory_id": r["memory_id"] + dm})
    for r in base.rows["sessions"]:
        out["sessions"].append({**r, "session_id": k.session(r["session_id"]),
                                "user_id": k.user(r["user_id"]),
                                "started_at": k.ts(r["started_at"]),
                                "last_event_at": k.ts(r["last_event_at"])})
    for r in base.rows["threads"]:
        out["threads"].append({**r, "thread_key": _thread_key(k, r["thread_key"])})
    for r in base.rows["change_log"]:
        mid = None if r["memory_id"] is None else r["memory_id"] + dm
        text = base.memory_text.get(r["memory_id"])
        summary = k.text(text)[:200] if text is not None and not r["summary"].startswith(
            "enc:") else r["summary"]
        out["change_log"].append({**r, "id": r["id"] + dc, "memory_id": mid,
                                  "thread_key": _thread_key(k, r["thread_key"]),
                                  "summary": summary})
    return out


def _thread_key(k: Copier, key: str) -> str:
    from memcli.store.memories import thread_key

    tenant, user, session = key.split("/", 2)
    return thread_key(tenant, k.user(None if user == "-" else user),
                      k.session(None if session == "-" else session))


def copy_vectors(base: Base, c: int, rng: np.random.Generator
                 ) -> tuple[list[int], np.ndarray]:
    ids = sorted(base.vectors)
    mat = np.stack([base.vectors[i] for i in ids]).astype(np.float32)
    mat += rng.normal(0, 0.015, size=mat.shape).astype(np.float32)
    mat /= np.linalg.norm(mat, axis=1, keepdims=True)
    return [i + c * base.max_id["memories"] for i in ids], mat.astype(np.float32)


# ----------------------------------------------------------------------------- writing


def _insert(db: Any, engine: str, table: str, rows: list[dict[str, Any]]) -> None:
    if not rows:
        return
    cols = list(rows[0])
    if engine == "sqlite":
        db.executemany(f"INSERT INTO {table} ({', '.join(cols)}) VALUES"
                       f" ({', '.join('?' * len(cols))})", [tuple(r[c] for c in cols)
                                                            for r in rows])
        return
    with db.conn.cursor() as cur, cur.copy(
            f"COPY {table} ({', '.join(cols)}) FROM STDIN") as cp:
        for r in rows:
            cp.write_row(tuple(r[c] for c in cols))


def _insert_vectors(db: Any, engine: str, ids: list[int], mat: np.ndarray,
                    scope: dict[int, tuple[str, str | None]]) -> None:
    if engine == "sqlite":
        db.backend.store_vectors(db, [(i, v.tobytes()) for i, v in zip(ids, mat, strict=True)])
        return
    from pgvector.psycopg import register_vector

    register_vector(db.conn)
    with db.conn.cursor() as cur, cur.copy(
            "COPY memory_vectors (memory_id, tenant_id, user_id, embedding)"
            " FROM STDIN (FORMAT BINARY)") as cp:
        cp.set_types(["int8", "text", "text", "vector"])
        for i, v in zip(ids, mat, strict=True):
            cp.write_row((i, *scope[i], v))


def _pg_drop_indexes(db: Any) -> list[str]:
    """Drop the secondary indexes of the bulk tables; return the statements that create them
    again (their own definitions)."""
    again = []
    for r in db.query(
            "SELECT i.relname AS name, pg_get_indexdef(i.oid) AS def, t.relname AS tab"
            " FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid"
            " JOIN pg_class t ON t.oid = x.indrelid"
            " LEFT JOIN pg_constraint c ON c.conindid = i.oid"
            " WHERE t.relname = ANY(?) AND c.oid IS NULL",
            (list(PG_DEFERRED),)):
        db.execute(f"DROP INDEX {r['name']}")
        again.append(r["def"])
    return again


def replicate(location: str, target: int) -> dict[str, Any]:
    """Copy the base in `location` until it holds `target` memories (whole copies)."""
    from memcli.core.records import utcnow
    from memcli.store.location import open_database

    engine = "postgresql" if location.startswith("postgresql") else "sqlite"
    db = open_database(location)
    t0 = time.perf_counter()
    base = Base(db, engine)
    m = len(base.rows["memories"])
    copies = max(1, -(-target // m))  # the base is copy 0
    if copies > 125:
        raise SystemExit(f"bulk: {copies} copies of a {m}-memory base; use a larger base")
    log(f"{engine}: base {m} memories, {len(base.rows['events'])} events, {base.postings}"
        f" postings; {copies - 1} copies -> {m * copies} memories")
    timing: dict[str, float] = {}
    if engine == "sqlite":
        db.execute("PRAGMA cache_size = -1000000")
    else:
        db.execute("SET maintenance_work_mem = '3GB'")
        db.execute("SET max_parallel_maintenance_workers = 1")
    again: list[str] = []
    with db.transaction():
        if engine == "postgresql":
            again = _pg_drop_indexes(db)  # (its SPLADE vectors are memory_sparse rows)
        else:
            db.execute("CREATE TEMP TABLE bulk_postings AS SELECT * FROM sparse_postings")
    entities = {(r["tenant_id"], r["kind"], r["norm"]): int(r["id"])
                for r in db.query("SELECT id, tenant_id, kind, norm FROM entities")}
    aliases = {(r["alias"], int(r["entity_id"]))
               for r in db.query("SELECT alias, entity_id FROM entity_aliases")}
    scope = {int(r["id"]): (r["tenant_id"], r["user_id"]) for r in base.rows["memories"]}
    rng = np.random.default_rng(3)
    now = utcnow()
    t1 = time.perf_counter()
    for c in range(1, copies):
        new_entities: list[tuple] = []
        new_aliases: list[tuple] = []
        rows = copy_rows(base, c, now, entities, new_entities, new_aliases, aliases)
        ids, mat = copy_vectors(base, c, rng)
        k = Copier(c, base)
        dm = c * base.max_id["memories"]
        with db.transaction():
            _insert(db, engine, "entities", [dict(zip(("id", "tenant_id", "kind", "norm",
                                                       "display", "created_at"), e, strict=True))
                                             for e in new_entities])
            _insert(db, engine, "entity_aliases", [{"alias": a, "entity_id": e}
                                                   for a, e in new_aliases])
            for table in ("events", "sessions", "memories", "history", "threads", "change_log",
                          "memory_sparse", "memory_entities"):
                _insert(db, engine, table, rows[table])
            _insert_vectors(db, engine, ids, mat,
                            {i + dm: (t, k.user(u)) for i, (t, u) in scope.items()})
            if engine == "sqlite":
                db.execute("INSERT INTO sparse_postings (term_id, memory_id, weight)"
                           " SELECT term_id, memory_id + ?, weight FROM bulk_postings", (dm,))
        if c % 5 == 0 or c == copies - 1:
            log(f"  copy {c}/{copies - 1}: {m * (c + 1)} memories,"
                f" {time.perf_counter() - t1:.0f}s")
    timing["copy_seconds"] = time.perf_counter() - t1
    t2 = time.perf_counter()
    with db.transaction():
        if engine == "sqlite":  # PostgreSQL's trigger counted the copies' vectors already
            db.execute("UPDATE sparse_df SET df = df * ?", (copies,))
            db.execute("DROP TABLE bulk_postings")
    if engine == "postgresql":
        for statement in again:  # one by one: each index's build time in the log
            s0 = time.perf_counter()
            db.execute(statement)
            log(f"  {statement[:70]}... {time.perf_counter() - s0:.0f}s")
        db.execute("ANALYZE")  # statistics for the appends; pg_scale's size step VACUUMs
    else:
        from memcli.store.sqlite.fts import rebuild_lexical

        with db.transaction():
            rebuild_lexical(db)  # memcli's own FTS5 rebuild (the same rows ingest writes)
        log(f"  lexical rebuilt {time.perf_counter() - t2:.0f}s")
        dim = int(db.scalar("SELECT value FROM meta WHERE key = 'embedder_dimension'"))
        db.backend.rebuild_vectors(db, dim)
        db.execute("ANALYZE")
    timing["index_seconds"] = time.perf_counter() - t2
    timing["seconds"] = time.perf_counter() - t0
    memories = _count(db, "memories")
    db.close()
    log(f"{engine}: {memories} memories in {timing['seconds']:.0f}s"
        f" (copies {timing['copy_seconds']:.0f}s, indexes {timing['index_seconds']:.0f}s)")
    return {"base_memories": m, "copies": copies, "memories": memories, **timing}
