"""`memcli import`: load an export file into a new or existing database, idempotently.

The whole file is read and checked first (`format.parse`: header version, every line against
its kind's fields, every ciphertext against the header's key id); a bad line stops the import
before the database is touched, with its line number. Then everything is written in one transaction.

Identity, so that importing twice adds nothing: an event is its `event_id` (or content hash,
as ingest decides); a memory is its event's chunk (episodes) or its tenant, kind, creation
time and stored content (everything else); a decision or task is the one over the same memory;
a proposal its tenant, user, field, creation time and value; checkpoints, sessions, artifacts
and relations their primary keys. A row already present is left as it is (import only adds).
Ids (memories, decisions, tasks, proposals) are kept when free in the target, so an import
into an empty database answers queries with the same ids; a taken id gets a new one, and the
references to it in the file (history, relations, ledger rows, proposals, `source_ids`) follow.

Derived data is recomputed through the write paths ingest uses: full-text and trigram rows,
entity links, then vectors and SPLADE terms with this side's models (`Memory.embed_pending`,
what `memcli embed` runs; `--defer-embed` leaves that to `memcli embed`).

Every text a record carries goes through `memcli.policy.redaction.redact_record` (key fields
excepted),
so a hand-made file cannot plant a secret. `high` values stay the ciphertext they are; the
header's `key_id` must be the target's key id, and a configured key must be that key, or the
import is refused: the rows would be unreadable there.

Writes stay in one tenant, as every write does: the file's rows must all be of the configured
tenant (or `--tenant-id`); a file of several tenants takes an explicit `--all-tenants`. Tenant ids
are never rewritten (that would merge two scopes).
"""

from __future__ import annotations

import base64
import functools
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from memcli.core.progress import Progress, report
from memcli.core.records import utcnow
from memcli.entities.extraction import extract_entities
from memcli.errors import UsageError
from memcli.ingest.background import queue_for
from memcli.policy.redaction import redact_fields
from memcli.portable import file_format
from memcli.store import events, memories, portable_sql, sparse, vectors
from memcli.store.filters import one_tenant_or_all
from memcli.store.sealing import META_KEY_ID
from memcli.store.sessions import check_session_user

if TYPE_CHECKING:
    from memcli.store.connection import Database
    from memcli.store.handle import MemoryHandle

Record = dict[str, Any]
REPORT_EVERY = 256  # records between two progress reports


# -- checking -------------------------------------------------------------------------------------
# A timestamp or an enumerated word (state, channel, op ...): no secret detector can match
# one, and skipping them halves the cost of an import.
_PLAIN = re.compile(r"\d{4}-\d\d-\d\dT[0-9:.]+Z?|[a-z_]{1,24}")


def _text_fields(spec: dict[str, str], rec: Record) -> list[str]:
    return [f for f in spec if f not in file_format.KEY_FIELDS and spec[f] != "history"
            and not (isinstance(rec[f], str) and _PLAIN.fullmatch(rec[f]))]


def scrub(rec: Record) -> bool:
    """Redact every text field in place (ids and hashes are keys, left alone); True when
    anything was redacted (a secret in a hand-made or edited file)."""
    kind = rec[file_format.RECORD]
    fields = _text_fields(file_format.SPECS[kind], rec)
    clean, found = redact_fields(rec, fields)
    changed = bool(found)
    rec.update({f: clean[f] for f in fields})
    if kind == "event" and found and isinstance(rec["redactions"], list):
        rec["redactions"] = sorted({*map(str, rec["redactions"]), *found})
    if kind == "memory":
        for item in rec["history"]:
            cleaned, hits = redact_fields(item, _text_fields(file_format.HISTORY, item))
            item.update(cleaned)
            changed = changed or bool(hits)
    return changed


def check_key(db: Database, key_id: str | None) -> str | None:
    """Refuse a file whose `high` rows could not be read in the target; a warning when no key
    is configured (the rows are imported sealed, readable once the key is set)."""
    if key_id is None:
        return None
    stored = db.get_meta(META_KEY_ID)
    if stored is not None and stored != key_id:
        raise UsageError(f"the file's `high` items are sealed with key {key_id}, this database's "
                         f"key is {stored}", "import into a database of that key (memcli key "
                         "status), or export from one with this key")
    key = db.crypto.key()
    if key is not None and key.id != key_id:
        raise UsageError(f"the file's `high` items are sealed with key {key_id}, the configured "
                         f"key is {key.id}", "set MEMCLI_KEY or MEMCLI_KEY_FILE to the key the "
                         "export was made with")
    if key is None:
        return (f"`high` items are imported sealed with key {key_id}; no key is configured, so "
                "they stay unread and unembedded until MEMCLI_KEY or MEMCLI_KEY_FILE gives it "
                "(then run `memcli embed`)")
    return None


# -- writing --------------------------------------------------------------------------------------
class _Loader:
    def __init__(self, memory: MemoryHandle, records: list[tuple[int, Record]],
                 progress: Progress | None) -> None:
        self.memory = memory
        self.db = memory.db
        self.by_kind: dict[str, list[Record]] = {k: [] for k in file_format.KINDS}
        self.lines: dict[int, int] = {}  # id(record) -> its line, for a row SQLite refuses
        self.line = 0
        for number, rec in records:
            self.by_kind[rec[file_format.RECORD]].append(rec)
            self.lines[id(rec)] = number
        self.counts = {k: {"added": 0, "skipped": 0} for k in file_format.KINDS}
        self.history_added = 0
        self.progress = progress
        self.done, self.total = 0, len(records)
        self.events: dict[str, str] = {}
        self.ids: dict[str, dict[int, int]] = {"memory": {}, "decision": {}, "task": {},
                                               "proposal": {}}
        self.added_memories: list[tuple[int, Record]] = []

    def _at(self, rec: Record) -> Record:
        self.line = self.lines[id(rec)]
        return rec

    def _count(self, kind: str, added: bool) -> None:
        self.counts[kind]["added" if added else "skipped"] += 1
        self.done += 1
        if self.done % REPORT_EVERY == 0 or self.done == self.total:
            report(self.progress, "importing", self.done, self.total)

    @staticmethod
    def _row(kind: str, rec: Record, skip: tuple[str, ...] = ()) -> dict[str, Any]:
        spec = file_format.SPECS[kind]
        return {f: file_format.to_column(kind, f, spec[f], rec[f]) for f in spec
                if f not in skip and spec[f] != "history"}

    def run(self) -> None:
        try:
            self._run()
        except Exception as exc:
            if not self.db.backend.is_constraint_error(exc):
                raise
            # e.g. a value outside a column's CHECK list
            reason = str(exc).split(": ", 1)[-1]
            raise file_format.FormatError(self.line, f"cannot be stored ({reason})") from None

    def _run(self) -> None:
        portable_sql.defer_foreign_keys(self.db)
        fresh = self._sessions()
        self._events(fresh)
        self._artifacts()
        self._consolidations()
        self._memories()
        self._relations()
        self._ledger("decision", "decisions", "decision")
        self._ledger("task", "tasks", "title")
        self._proposals()
        self._checkpoints()

    def _sessions(self) -> set[tuple[str, str]]:
        fresh = set()
        for rec in map(self._at, self.by_kind["session"]):
            key = {"tenant_id": rec["tenant_id"], "session_id": rec["session_id"]}
            added = not portable_sql.exists(self.db, "sessions", key)
            if added:
                portable_sql.insert_row(self.db, "sessions", self._row("session", rec))
                fresh.add((rec["tenant_id"], rec["session_id"]))
            self._count("session", added)
        return fresh

    def _events(self, fresh: set[tuple[str, str]]) -> None:
        for rec in map(self._at, self.by_kind["event"]):
            found = events.existing_event(self.db, rec["event_id"], rec["content_hash"])
            if found:
                self.events[rec["event_id"]] = found
                self._count("event", False)
                continue
            check_session_user(self.db, rec["tenant_id"], rec["session_id"], rec["user_id"])
            portable_sql.insert_row(self.db, "events", self._row("event", rec))
            self.events[rec["event_id"]] = rec["event_id"]
            if rec["session_id"] is not None and (rec["tenant_id"], rec["session_id"]) not in fresh:
                # A session this import did not bring whole: counted as ingest counts it.
                events.touch_session(self.db, rec["tenant_id"], rec["session_id"], rec["user_id"],
                                 rec["ts"])
            self._count("event", True)

    def _artifacts(self) -> None:
        for rec in map(self._at, self.by_kind["artifact"]):
            added = not portable_sql.exists(
                self.db, "artifacts", {"artifact_id": rec["artifact_id"]}
            )
            if added:
                row = self._row("artifact", rec, skip=("body_encoding",))
                row["event_id"] = self.events.get(rec["event_id"])
                if row["event_id"] is None:
                    raise file_format.FormatError(
                        self.line, "an artifact of an event the file does not hold"
                    )
                if rec["body_encoding"] == "base64":
                    row["body"] = base64.b64decode(rec["body"])
                elif rec["body_encoding"] == "utf-8":
                    row["body"] = rec["body"].encode("utf-8")
                portable_sql.insert_row(self.db, "artifacts", row)
            self._count("artifact", added)

    def _consolidations(self) -> None:
        for rec in map(self._at, self.by_kind["consolidation"]):
            key = {"tenant_id": rec["tenant_id"], "session_id": rec["session_id"]}
            added = not portable_sql.exists(self.db, "session_consolidation", key)
            if added:
                row = self._row("consolidation", rec, skip=("last_event_id",))
                last = rec["last_event_id"]
                row["last_seq"] = portable_sql.event_seq(self.db, self.events.get(last, last)) or 0
                portable_sql.insert_row(self.db, "session_consolidation", row)
            self._count("consolidation", added)

    def _absent(self, kind: str, table: str, found: Callable[[Record], int | None]
                ) -> list[Record]:
        """The file's records of `kind` the target lacks, with their ids in `table` allocated;
        `found` gives the target's id of one it holds (mapped to it, counted as skipped)."""
        todo = []
        for rec in map(self._at, self.by_kind[kind]):
            target = found(rec)
            if target is not None:
                self.ids[kind][rec["id"]] = target
                self._count(kind, False)
            else:
                todo.append(rec)
        self._allocate(kind, table, todo)
        return todo

    def _new_row(self, kind: str, rec: Record) -> dict[str, Any]:
        """The row of a record `_absent` gave, with the id allocated to it."""
        row = self._row(kind, rec)
        row["id"] = self.ids[kind][rec["id"]]
        return row

    def _allocate(self, kind: str, table: str, todo: list[Record]) -> None:
        """Keep each file id free in the target; give the others ids above both sides'."""
        wanted = [r["id"] for r in todo]
        taken = portable_sql.taken_ids(self.db, table, wanted)
        following = max([portable_sql.max_id(self.db, table), *wanted]) + 1
        used: set[int] = set()
        for rec in map(self._at, todo):
            new = rec["id"]
            if new in taken or new in used:
                new, following = following, following + 1
            used.add(new)
            self.ids[kind][rec["id"]] = new

    def _map_memory(self, value: Any, *, keep: bool = True) -> Any:
        if value is None:
            return None
        return self.ids["memory"].get(value, value if keep else None)

    def _sources(self, values: Any) -> Any:
        if not isinstance(values, list):
            return values  # sealed, or not a list: as it is
        return [self.ids["memory"].get(v, v) if isinstance(v, int) and not isinstance(v, bool)
                else self.events.get(v, v) if isinstance(v, str) else v for v in values]

    def _ref(self, value: str | None) -> str | None:
        if value is not None and value.isdigit():
            return str(self.ids["memory"].get(int(value), int(value)))
        return value

    def _memories(self) -> None:
        # Memories not cut from an event, by natural key: one read, not a scan per memory.
        derived = portable_sql.derived_memory_keys(self.db) if any(
            r["event_id"] is None for r in self.by_kind["memory"]) else {}

        def found(rec: Record) -> int | None:
            rec["event_id"] = self.events.get(rec["event_id"], rec["event_id"])
            if rec["event_id"] is None:
                return derived.get((rec["tenant_id"], rec["kind"], rec["created_at"],
                                    rec["content"]))
            return portable_sql.episode_id(self.db, rec["event_id"], rec["chunk_index"],
                                           rec["kind"])

        for rec in map(self._at, self._absent("memory", "memories", found)):
            rec["source_ids"] = self._sources(rec["source_ids"])
            row = self._new_row("memory", rec)
            row["event_seq"] = portable_sql.event_seq(self.db, rec["event_id"])
            portable_sql.insert_row(self.db, "memories", row)
            for item in rec["history"]:
                hist = {f: file_format.to_column("history", f, file_format.HISTORY[f], item[f])
                        for f in file_format.HISTORY}
                hist.update(memory_id=row["id"], old_ref=self._ref(item["old_ref"]),
                            new_ref=self._ref(item["new_ref"]),
                            event_id=self.events.get(item["event_id"], item["event_id"]))
                portable_sql.insert_row(self.db, "history", hist)
                self.history_added += 1
            self.added_memories.append((row["id"], rec))
            self._count("memory", True)
        ids = [mid for mid, _ in self.added_memories]
        portable_sql.index_lexical(self.db, ids)
        now = utcnow()
        cache: dict[tuple[str, str, str], int] = {}
        aliases: set[tuple[str, int]] = set()
        threads: dict[str, list[tuple[str, int | None, str]]] = {}
        for mid, rec in self.added_memories:
            if rec["sensitivity"] == "high":
                continue  # entity names and change-log lines are plain text: never a `high` one's
            memories.link_entities(self.db, mid, extract_entities(rec["content"]), now,
                              ids=cache, aliases=aliases, tenant_id=rec["tenant_id"])
            key = memories.thread_key(rec["tenant_id"], rec["user_id"], rec["session_id"])
            threads.setdefault(key, []).append(("created", mid, rec["content"]))
        for key, changes in threads.items():  # an agent's next delta bundle sees them
            memories.bump_revision(self.db, key, changes)

    def _relations(self) -> None:
        for rec in map(self._at, self.by_kind["relation"]):
            row = self._row("relation", rec)
            row["src_id"], row["dst_id"] = (self._map_memory(rec["src_id"], keep=False),
                                            self._map_memory(rec["dst_id"], keep=False))
            if row["src_id"] is None or row["dst_id"] is None:
                raise file_format.FormatError(
                    self.line, "a relation to a memory the file does not hold"
                )
            key = {k: row[k] for k in ("src_id", "dst_id", "kind")}
            added = not portable_sql.exists(self.db, "relations", key)
            if added:
                portable_sql.insert_row(self.db, "relations", row)
            self._count("relation", added)

    def _ledger(self, kind: str, table: str, text_field: str) -> None:
        def found(rec: Record) -> int | None:
            rec["memory_id"] = self._map_memory(rec["memory_id"], keep=False)
            return portable_sql.ledger_by_key(self.db, table, rec, text_field)

        for rec in map(self._at, self._absent(kind, table, found)):
            row = self._new_row(kind, rec)
            for field in ("supersedes", "superseded_by"):  # foreign keys: mapped or none
                if field in row and row[field] is not None:
                    row[field] = self.ids[kind].get(row[field])
            portable_sql.insert_row(self.db, table, row)
            self._count(kind, True)

    def _proposals(self) -> None:
        found = functools.partial(portable_sql.proposal_by_key, self.db)
        for rec in map(self._at, self._absent("proposal", "proposals", found)):
            rec["source_ids"] = self._sources(rec["source_ids"])
            row = self._new_row("proposal", rec)
            row["memory_id"] = self._map_memory(rec["memory_id"])
            row["old_memory_id"] = self._map_memory(rec["old_memory_id"])
            portable_sql.insert_row(self.db, "proposals", row)
            self._count("proposal", True)

    def _checkpoints(self) -> None:
        for rec in map(self._at, self.by_kind["checkpoint"]):
            key = {k: rec[k] for k in ("tenant_id", "user_id", "thread_id")}
            added = not portable_sql.exists(self.db, "checkpoints", key)
            if added:
                portable_sql.insert_row(self.db, "checkpoints", self._row("checkpoint", rec))
            self._count("checkpoint", added)


def _embed_forgotten(memory: MemoryHandle, ids: list[int]) -> int:
    """Vectors (and sparse terms) for imported soft-deleted memories too, as the source had
    them: `memcli restore` does not embed, so without these a restored one would miss the
    dense leg."""
    rows = portable_sql.unembedded_forgotten(memory.db, ids)
    if not rows or memory.embedder is None:
        return 0
    texts = [text for _, text in rows]
    matrix = memory.embedder.embed_documents(texts).astype("float32")
    encoded = memory.sparse.encode_documents(texts) if memory.sparse is not None else None
    with memory.db.transaction():
        vectors.insert_vectors(memory.db, [(mid, v.tobytes()) for (mid, _), v
                                       in zip(rows, matrix, strict=True)])
        if encoded is not None and memory.sparse is not None:
            sparse.record_vocab(memory.db, memory.sparse.vocab_hash)
            sparse.insert_postings(memory.db, [(mid, terms) for (mid, _), terms
                                                   in zip(rows, encoded, strict=True)])
    return len(rows)


def check_tenants(records: list[tuple[int, Record]], tenant_id: str) -> None:
    """Writes stay in one tenant unless asked: a row of another tenant refuses the file."""
    for number, rec in records:
        if rec.get("tenant_id", tenant_id) != tenant_id:
            raise UsageError(f"line {number}: a row of tenant {rec['tenant_id']!r}, not "
                             f"{tenant_id!r}", "give --tenant-id, or --all-tenants to load every "
                             "tenant of the file")


def load_parsed(memory: MemoryHandle, head: dict[str, Any], records: list[tuple[int, Record]], *,
                tenant_id: str | None = None, all_tenants: bool = False,
                defer_embed: bool = False, progress: Progress | None = None
                ) -> dict[str, Any]:
    """Load what `parse` read (the CLI parses before it opens, or creates, the database).
    Every row must be of `tenant_id` (default: the memory's tenant) unless `all_tenants`."""

    one_tenant_or_all(tenant_id, all_tenants)
    if not all_tenants:
        check_tenants(records, tenant_id or memory.tenant)
    redacted = sum(scrub(rec) for _, rec in records)
    db = memory.db
    notes: list[str] = []
    note = check_key(db, head.get("key_id"))
    if note:
        notes.append(note)
    loader = _Loader(memory, records, progress)
    try:
        with db.transaction():
            if head.get("key_id") and db.get_meta(META_KEY_ID) is None:
                db.set_meta(META_KEY_ID, head["key_id"])  # the file's sealed rows' key
                db.crypto.install()
            loader.run()
    except Exception as exc:
        if not db.backend.is_constraint_error(exc):
            raise
        # a deferred foreign key, checked at commit (rolled back)
        raise UsageError("the file refers to rows it does not hold (a session, event or "
                         "memory)", "nothing was imported; re-export the file") from None
    embedded = deferred = 0
    added = len(loader.added_memories)
    models = memory.embedder is not None or memory.sparse is not None
    queue = queue_for(db)  # inside `memcli serve`: its indexer writes the vectors
    if added and models and not defer_embed:
        forgotten = _embed_forgotten(memory, [mid for mid, _ in loader.added_memories])
        embedded = forgotten + (memory.embed_pending(progress=progress) if queue is None else 0)
        if queue is not None:  # the live ones are the indexer's, as ingest's are
            deferred = added - forgotten
    if defer_embed:
        deferred = added
    if queue is not None and added:
        queue.notify()
    ours = memory.embedder.model_id if memory.embedder is not None else None
    if head.get("embedder") and ours and head["embedder"] != ours and loader.added_memories:
        notes.append(f"the export was embedded with {head['embedder']}; vectors are "
                     f"recomputed with {ours}")
    if defer_embed and loader.added_memories:
        notes.append("embeddings deferred: run `memcli embed` to compute them")
    return {
        "format": file_format.FORMAT, "version": head["version"],
        "tenants": sorted({rec["tenant_id"] for _, rec in records if "tenant_id" in rec}),
        "counts": loader.counts,
        "added": sum(c["added"] for c in loader.counts.values()),
        "skipped": sum(c["skipped"] for c in loader.counts.values()),
        "history_added": loader.history_added,
        "redacted_records": redacted,
        "embedded": embedded,
        "deferred_embedding": deferred,
        "notes": notes,
    }
