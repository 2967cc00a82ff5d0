"""The library's front door: `Memory` opens a database and offers every operation.

    from memcli import Memory
    with Memory.configured("memory.db") as m:  # the CLI's models: e5-small + SPLADE-tiny
        m.ingest([{"text": "Alice likes green tea", "session_id": "s1", "user_id": "alice"}])
        result = m.query("what does Alice drink?", filters=m.filters(user_id="alice"))

`Memory.open(path)` uses only the models passed to it (none: full-text and entity search).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memcli.config import (
    LifecycleSettings,
    RetrievalSettings,
    Settings,
    load_settings,
    thread_defaults,
)
from memcli.core.progress import report
from memcli.core.records import Hit, IngestReport, QueryResult, parse_clock
from memcli.core.tokens import count_tokens
from memcli.errors import DatabaseBusyError, UsageError
from memcli.ingest.background import queue_for, wait_for
from memcli.lifecycle import purge as purge_mod
from memcli.policy.categories import Categories, load_categories
from memcli.providers.embedders import get_embedder
from memcli.providers.passes import encode_both
from memcli.providers.reranker import make_reranker
from memcli.providers.splade import default_encoder
from memcli.retrieval import fallback as recency
from memcli.retrieval import scope as widening
from memcli.retrieval import search
from memcli.retrieval.rerank import annotate, rerank
from memcli.retrieval.stages import Candidate, RankContext
from memcli.store import memories, vectors
from memcli.store import sparse as sparse_sql
from memcli.store.connection import HINT_WAIT
from memcli.store.filters import DEFAULT_TENANT, Filters, one_tenant_or_all
from memcli.store.history import list_history
from memcli.store.metrics import record_request
from memcli.store.opener import open_database
from memcli.store.owner import Owner, check_trail
from memcli.store.postgres.tenant_roles import refuse_bound

if TYPE_CHECKING:
    from memcli.core.progress import Progress
    from memcli.operations.requests import QueryRequest
    from memcli.providers.embedders import Embedder
    from memcli.providers.reranker import Reranker
    from memcli.providers.splade import SpladeEncoder
    from memcli.store.connection import Database

BULLET_CHARS = 280


def make_embedder(settings: Settings) -> Embedder | None:
    cfg = settings.embedder
    if cfg.provider == "none":
        return None
    options: dict[str, Any] = {}
    if cfg.provider == "openai":
        if not (cfg.base_url and cfg.model and cfg.dimension):
            raise UsageError("the openai embedder needs base_url, model and dimension",
                             "set MEMCLI_EMBED_BASE_URL, MEMCLI_EMBED_MODEL, "
                             "MEMCLI_EMBED_DIMENSION")
        options = {"base_url": cfg.base_url, "model": cfg.model, "dimension": cfg.dimension,
                   "api_key": cfg.api_key}
    elif cfg.provider == "hash" and cfg.dimension:
        options = {"dimension": cfg.dimension}
    return get_embedder(cfg.provider, **options)


def make_sparse(settings: Settings) -> SpladeEncoder | None:
    if settings.retrieval.leg_weights.get("sparse", 0) <= 0:
        return None

    return default_encoder()


def _tenant(settings: Settings, bound: str | None) -> str:
    """The memory's tenant: the configured one, or on PostgreSQL the tenant the login role is
    bound to (row-level security); a configured tenant that differs from it is an error."""
    if bound is None:
        return settings.tenant
    if "tenant" in settings.model_fields_set:
        _check_bound(bound, settings.tenant)
    return bound


def _check_bound(bound: str | None, tenant: str | None) -> None:
    if bound is not None and tenant is not None and tenant != bound:
        raise UsageError(f"tenant {tenant!r} asked for, but this login role is bound to tenant "
                         f"{bound!r} (row-level security)",
                         "leave the tenant unset (MEMCLI_TENANT, --tenant-id) or set it to "
                         f"{bound!r}")


class Memory:
    def __init__(self, db: Database, *, embedder: Embedder | None = None,
                 sparse: SpladeEncoder | None = None, retrieval: RetrievalSettings | None = None,
                 categories: Categories | None = None, encoding: str = "cl100k_base",
                 check_embedder: bool = True, tenant: str = DEFAULT_TENANT,
                 lifecycle: LifecycleSettings | None = None,
                 reranker: Reranker | None = None) -> None:
        self.db = db
        self.reranker = reranker  # reorders a query's fused top N (docs/guides/reranking.md)
        # The app limit every app write enforces (memcli.derived.applimit).
        self.lifecycle = lifecycle or LifecycleSettings()
        # The tenant of every read and write that names none (never "all tenants").
        self.tenant = tenant
        self.embedder = embedder
        self.retrieval = retrieval or RetrievalSettings()
        self.categories = categories or load_categories(None)
        self.encoding = encoding
        self.sparse = sparse
        self._reader: Database | None = None
        if db.read_only and check_embedder:
            # A write-protected file cannot record the models: a leg whose model it has not
            # recorded is left out rather than run against an index that is not there.
            if db.get_meta("embedder_model") is None:
                self.embedder = embedder = None
            if db.get_meta("sparse_model") is None:
                self.sparse = sparse = None
        if embedder is not None and check_embedder:
            vectors.check_embedder(db, embedder.model_id, embedder.dimension)
        if sparse is not None and check_embedder:
            sparse_sql.check_model(db, sparse.model_id)

    @classmethod
    def open(cls, path: str | Path, *, embedder: Embedder | None = None,
             sparse: SpladeEncoder | None = None, settings: Settings | None = None,
             check_embedder: bool = True, must_exist: bool = False) -> Memory:
        """`must_exist`: for reading only: no database at `path` raises NoDatabaseError and
        nothing is created there."""
        settings = settings or Settings(db=path)
        db = open_database(path, must_exist=must_exist, busy_timeout=settings.busy_timeout)
        try:
            return cls(db, embedder=embedder, sparse=sparse, retrieval=settings.retrieval,
                       categories=load_categories(settings.categories_file),
                       encoding=settings.encoding, check_embedder=check_embedder,
                       tenant=_tenant(settings, db.bound_tenant), lifecycle=settings.lifecycle,
                       reranker=make_reranker(settings.rerank))
        except BaseException as exc:
            db.close()  # never leave the file open behind an error
            failure = db.backend.environment_error(db, exc)
            if failure is not None:
                raise failure from exc
            raise

    @classmethod
    def configured(cls, path: str | Path | None = None, **overrides: Any) -> Memory:
        """Open with everything the CLI would use: settings from the environment and config
        file (`overrides` win, e.g. embedder=...), the configured embedder and the SPLADE leg.
        Models load on first use."""

        thread_defaults()  # as the CLI: passive OpenMP waiting, one OpenBLAS thread
        settings = load_settings(path, **overrides)
        return cls.open(settings.db, embedder=make_embedder(settings),
                        sparse=make_sparse(settings), settings=settings)

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        self.close()
        # A read-only file, a full disk or an I/O error is said as such, with the path.
        failure = self.db.backend.environment_error(self.db, exc) if exc is not None else None
        if failure is not None:
            raise failure from exc

    def close(self) -> None:
        if self.reranker is not None:
            self.reranker.close()
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        self.db.close()

    def reader(self) -> Database | None:
        """A second, read-only connection to the same file, for a SQL leg that runs on another
        thread beside the others (WAL lets readers run side by side). None when that would not
        see what this connection sees: an in-memory database, or an open write transaction."""
        if self.db.path == ":memory:" or self.db.in_transaction:
            return None
        if self._reader is None:
            # `location`: a server's as given (its `path` masks the password for messages).
            try:
                self._reader = open_database(getattr(self.db, "location", self.db.path),
                                             readonly=True)
            except DatabaseBusyError:  # a daemon's pool with no connection to spare
                return None
        return self._reader

    # -- writing -------------------------------------------------------------------------------
    def ingest(self, records: list[dict[str, Any]] | list[tuple[int, Any]], *,
               defaults: dict[str, Any] | None = None, strict: bool = False,
               defer_embed: bool = False, progress: Progress | None = None) -> IngestReport:
        """Record events. `records` are dicts, or (line number, parsed value) pairs.
        `progress`: a callback for long batches (memcli/core/progress.py)."""
        numbered = [
            r if isinstance(r, tuple) else (i, r) for i, r in enumerate(records, start=1)
        ]
        # Imported here: redaction rules and extraction stay off the start-up of the reads.
        from memcli.ingest import prepare  # noqa: PLC0415

        defaults = dict(defaults or {})
        if defaults.get("tenant_id") is None:
            defaults["tenant_id"] = self.tenant  # a record naming no tenant: the configured one

        return prepare.ingest(self.db, numbered, embedder=self.embedder, sparse=self.sparse,
                                 defaults=defaults, strict=strict, defer_embed=defer_embed,
                                 progress=progress, memory=self,
                                 check_category=self.categories.check_write,
                                 queue=queue_for(self.db))

    def wait_indexed(self, memory_ids: list[int]) -> None:
        """Inside a daemon that indexes in the background, return once these memories have
        their vectors and sparse terms (`ingest --wait`); elsewhere ingest wrote them already."""

        queue = queue_for(self.db)
        if queue is not None and (self.embedder is not None or self.sparse is not None):
            wait_for(self.db, memory_ids, queue, dense=self.embedder is not None,
                     sparse=self.sparse is not None, catch_up=self.embed_pending)

    def embed_pending(self, batch_size: int = 256, progress: Progress | None = None) -> int:
        """Embed memories stored without vectors or sparse terms (after --defer-embed); each
        batch's sparse pass runs beside its dense pass (memcli/providers/passes.py)."""

        if self.embedder is None and self.sparse is None:
            raise UsageError("no embedder configured", "set MEMCLI_EMBEDDER")
        embedder, sparse = self.embedder, self.sparse
        if embedder is None:
            return self._sparse_pending(batch_size, progress)
        done = 0
        total = memories.count_without_vectors(self.db, active_only=True) if progress else None
        while True:
            report(progress, "embedding", done, total)
            rows = memories.memories_without_vectors(self.db, batch_size)
            terms_rows = ([] if sparse is None
                          else sparse_sql.memories_without_sparse(self.db, batch_size))
            if not rows and not terms_rows:
                return done
            matrix, encoded = encode_both(embedder, [text for _, text in rows],
                                          sparse, [text for _, text in terms_rows])
            with self.db.transaction():
                if terms_rows:
                    assert sparse is not None
                    sparse_sql.record_vocab(self.db, sparse.vocab_hash)
                    sparse_sql.insert_postings(self.db, [
                        (mid, v) for (mid, _), v in zip(terms_rows, encoded, strict=True)])
                if rows:
                    vectors.insert_vectors(self.db, [(mid, v.tobytes()) for (mid, _), v
                                                 in zip(rows, matrix, strict=True)])
            done += len(rows)

    def _sparse_pending(self, batch_size: int, progress: Progress | None = None) -> int:
        assert self.sparse is not None
        done = 0
        total = sparse_sql.count_without_sparse(self.db) if progress else None
        while True:
            report(progress, "sparse terms", done, total)
            rows = sparse_sql.memories_without_sparse(self.db, batch_size)
            if not rows:
                return done
            encoded = self.sparse.encode_documents([text for _, text in rows])
            with self.db.transaction():
                sparse_sql.record_vocab(self.db, self.sparse.vocab_hash)
                sparse_sql.insert_postings(
                    self.db, [(mid, v) for (mid, _), v in zip(rows, encoded, strict=True)])
            done += len(rows)

    def reindex(self, progress: Progress | None = None) -> int:
        """Drop every vector, record the configured embedder, and embed everything again."""

        refuse_bound(self.db, "reindex")
        if self.embedder is None:
            raise UsageError("no embedder configured", "set MEMCLI_EMBEDDER")
        with self.db.transaction():
            vectors.reset_vectors(self.db, self.embedder.model_id, self.embedder.dimension)
            if self.sparse is not None:
                sparse_sql.reset(self.db, self.sparse.model_id)
        return self.embed_pending(progress=progress)

    # -- reading -------------------------------------------------------------------------------
    def filters(self, agent: str | None = None, *, all_tenants: bool = False,
                **kwargs: Any) -> Filters:
        """Filters for a query, with the agent's category allowlist enforced. No `tenant_id`:
        this memory's tenant; reading across tenants takes `all_tenants=True`."""
        one_tenant_or_all(kwargs.get("tenant_id"), all_tenants)
        if not all_tenants and kwargs.get("tenant_id") is None:
            kwargs["tenant_id"] = self.tenant
        _check_bound(self.db.bound_tenant, kwargs.get("tenant_id"))
        categories = tuple(kwargs.pop("categories", None) or ())
        self.categories.check(agent, categories)
        allowed = self.categories.allowed(agent)
        hidden = self.categories.hidden(agent, categories)
        kwargs = {k: (tuple(v) if isinstance(v, list) else v) for k, v in kwargs.items()
                  if v is not None and v != ()}
        if kwargs.get("as_of") is not None:
            # Time travel reads what was current then: a fact superseded since still counts.
            kwargs.setdefault("states", ("active", "superseded"))
        return Filters(categories=categories, allowed_categories=allowed,
                       excluded_categories=hidden, all_tenants=all_tenants, **kwargs)

    def ask(self, request: QueryRequest, *, fallback: bool = False) -> QueryResult:
        """A validated query request (memcli.operations.requests.QueryRequest) answered: its
        conditions as filters (the asking agent's allowlist enforced), on the legs it names
        (default: every configured one), then `query`."""
        filters = self.filters(
            agent=request.agent_id, all_tenants=request.all_tenants,
            categories=request.categories,
            **({"sensitivities": tuple(request.sensitivity)} if request.sensitivity else {}),
            as_of=request.as_of, **request.conditions())
        retrieval = self.retrieval
        if request.legs is not None:
            retrieval = retrieval.model_copy(update={"leg_weights": {
                k: w for k, w in retrieval.leg_weights.items() if k in request.legs}})
        return self.query(request.query, filters=filters, top_k=request.top_k,
                          threshold=request.threshold, budget_tokens=request.budget_tokens,
                          return_format=request.return_format, widen=request.widen,
                          fallback=fallback, retrieval=retrieval)

    def query(self, text: str, *, filters: Filters | None = None, top_k: int = 10,
              threshold: float | None = None, budget_tokens: int | None = None,
              return_format: str = "full", widen: bool = True, record_access: bool = True,
              fallback: bool = False, retrieval: RetrievalSettings | None = None
              ) -> QueryResult:
        """`fallback`: when every leg finds nothing, answer with the newest memories in scope
        (memcli.retrieval.fallback), as `memcli query` and the service do for their default
        legs; off by default: a library search stays strict. `retrieval`: this query's
        settings (default the memory's; a request naming its legs keeps only those)."""
        t0 = time.perf_counter()
        settings = retrieval or self.retrieval
        filters = filters or self.filters()
        scope = "session" if filters.session_id else ("user" if filters.user_id else "all")
        path = scope
        clock = {"now": parse_clock(filters.as_of)} if filters.as_of else {}
        legs = search.run_legs(self.db, self.embedder, text, filters, settings,
                               sparse=self.sparse, reader=self.reader())
        ranked = search.rank(RankContext(self.db, filters, text, settings, **clock), legs)
        # The evolution plan: widen on a recall cue or when the session has too little full-text
        # evidence (memcli.retrieval.scope, the rule `acb build` uses too).
        wider = None
        if widen and filters.session_id and widening.should_widen(
                text, legs, [c.id for c in ranked], settings.min_session_hits):
            wider = widening.wider_scope(self.db, filters)
        if wider is not None:
            legs = search.run_legs(self.db, self.embedder, text, wider, settings,
                                   sparse=self.sparse, reader=self.reader())
            ranked = search.rank(RankContext(self.db, wider, text, settings, **clock),
                                 legs)
            scope = "user"
            path = f"{path}>{scope}"
        fulltext = widening.fulltext_hits(legs) or 0
        searched = wider or filters
        if fallback and recency.found_nothing(legs):
            legs = {**legs, **recency.recent_leg(self.db, searched,
                                                 settings.candidates_per_leg)}
            ranked = search.rank(RankContext(self.db, searched, text, settings, **clock),
                                 legs)
            path = f"{path}>{recency.RECENT_LEG}"
        reranked = rerank(ranked, text, self.reranker)
        ranked = search.load_rows(self.db, search.judged_top(
            self.db, self.embedder, self.sparse, text, searched, settings, legs, ranked,
            top_k, threshold))
        search.cap_summaries(self.db, self.embedder, self.sparse, text, searched,
                             settings, legs, ranked)
        if threshold is not None:  # a summary held to its turns may fall under it
            ranked = [c for c in ranked if (c.relevance or 0.0) >= threshold]
        no_relevant = not any((c.relevance or 0.0) >= settings.min_relevance
                              for c in ranked)
        hits = [self._hit(c, return_format, scope, no_relevant) for c in ranked]
        annotate(hits, reranked)
        used = 0
        if budget_tokens is not None:
            kept = []
            for hit in hits:
                cost = count_tokens(hit.text, self.encoding)
                if used + cost > budget_tokens:
                    break  # rank order: a lower hit never jumps over a higher one
                used += cost
                hit.tokens = cost
                kept.append(hit)
            hits = kept
        result = QueryResult(
            query=text, scope=scope, path=path, hits=hits,
            legs={k: len(v) for k, v in legs.items()},
            fusion=settings.fusion, budget_tokens=budget_tokens, tokens_used=used,
            no_relevant=no_relevant,
            latency_ms=round((time.perf_counter() - t0) * 1000, 3), rerank=reranked,
        )
        if record_access:
            self._after_read([h.id for h in hits], {
                "command": "query", "tenant_id": filters.tenant_id, "user_id": filters.user_id,
                "session_id": filters.session_id,
                "lexical_hits": fulltext,  # the full-text legs' distinct memories
                "sparse_hits": len(legs.get("sparse", [])),
                "vector_hits": len(legs.get("dense", [])),
                "entity_hits": len(legs.get("entity", [])),
                "retrieval_path": path, "fallbacks": path.count(">"), "items": len(hits),
                "tokens_used": used, "truncated": int(len(hits) < min(top_k, len(ranked))),
                "latency_ms": result.latency_ms,
            })
        return result

    def _after_read(self, ids: list[int], metrics: dict[str, Any]) -> None:
        """Access counts and the request-metrics row, in one short write."""

        if self.db.read_only:
            return  # a write-protected file still answers; these hints are skipped
        try:
            with self.db.transaction(wait=HINT_WAIT):
                memories.record_access(self.db, ids)
                record_request(self.db, metrics)
        except DatabaseBusyError:
            pass  # both are hints; a busy writer must not fail a read
        except Exception as exc:
            if self.db.backend.environment_error(self.db, exc) is None:
                raise
            # A full disk (or a file made read-only since it was opened): nor must that.

    @staticmethod
    def _hit(cand: Candidate, return_format: str, scope: str, no_relevant: bool) -> Hit:
        row = cand.row
        text = row["content"]
        if return_format == "bullets":
            first = " ".join(text.split())
            if len(first) > BULLET_CHARS:
                first = first[: BULLET_CHARS - 1].rstrip() + "…"
            text = f"[{row['category']}] {first}" if row["category"] else first
        return Hit(
            id=row["id"], kind=row["kind"], category=row["category"], text=text,
            score=round(cand.score, 6), relevance=cand.relevance or 0.0, no_relevant=no_relevant,
            scores={leg: {"rank": r, "score": round(s, 6)} for leg, (r, s) in cand.legs.items()},
            boosts=cand.shown_boosts(), event_id=row["event_id"], tenant_id=row["tenant_id"],
            user_id=row["user_id"], agent_id=row["agent_id"], session_id=row["session_id"],
            app_id=row["app_id"], run_id=row["run_id"], channel=row["channel"],
            sensitivity=row["sensitivity"], actor_type=row["actor_type"],
            actor_id=row["actor_id"], event_time=row["event_time"],
            importance=row["importance"], pinned=bool(row["pinned"]),
            tokens=row["token_count"], source_ids=json.loads(row["source_ids"]), scope=scope,
        )

    # -- audit and lifecycle -------------------------------------------------------------------
    def history(self, memory_id: int | None = None, *, all_tenants: bool = False,
                owner: Owner | None = None, **scope: Any) -> list[dict[str, Any]]:
        """The audit trail of a memory or a scope, in this memory's tenant unless another one is
        named (or `all_tenants`). A memory id outside the tenant (or `owner`) is not found."""

        one_tenant_or_all(scope.get("tenant_id"), all_tenants)
        if not all_tenants and scope.get("tenant_id") is None:
            scope["tenant_id"] = owner.tenant_id if owner else self.tenant
        if memory_id is not None and not all_tenants:
            check_trail(self.db, memory_id, owner or self.owner(scope["tenant_id"]))
        return list_history(self.db, memory_id=memory_id, **scope)

    def plan_purge(self, **scope: Any) -> dict[str, Any]:
        return purge_mod.plan_purge(self.db, **scope)

    def purge(self, **scope: Any) -> dict[str, Any]:
        return purge_mod.apply_purge(self.db, purge_mod.plan_purge(self.db, **scope))

    def owner(self, tenant_id: str | None = None) -> Owner:
        """Whose rows a command on one id may touch: this memory's tenant (or `tenant_id`); a
        server narrows it further for a bound caller (memcli.service.api)."""

        return Owner(tenant_id or self.tenant)

    def forget(self, memory_id: int, owner: Owner | None = None) -> dict[str, Any]:
        """Soft-delete a memory of `owner`'s (default: this memory's tenant)."""

        return purge_mod.forget(self.db, memory_id, owner=owner or self.owner())

    def restore(self, memory_id: int, owner: Owner | None = None) -> dict[str, Any]:
        return purge_mod.restore(self.db, memory_id, owner=owner or self.owner())

    def stats(self) -> dict[str, Any]:
        out = memories.stats(self.db)
        out["db_bytes"] = self.db.size_bytes()
        out["schema_version"] = self.db.backend.schema_version(self.db)
        out["embedder"] = {
            "configured": self.embedder.model_id if self.embedder else None,
            "stored": self.db.get_meta("embedder_model"),
            "dimension": self.db.get_meta("embedder_dimension"),
            "pending": memories.count_without_vectors(self.db),
        }
        out["vector_search"] = self.db.vec_enabled
        return out
