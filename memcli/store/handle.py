"""`MemoryHandle`: what the domain packages (ingest, ledger, lifecycle, acb ...) need of an open
memory: its database, its models, its tenant and its settings.

The library's facade, `memcli.operations.memory.Memory`, satisfies it; domain code takes a
handle rather than the facade, because the facade sits above the domain and calls into it. A
test or a tool may pass any object with these members."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from memcli.config import LifecycleSettings, RetrievalSettings
    from memcli.core.progress import Progress
    from memcli.policy.categories import Categories
    from memcli.providers.embedding import Embedder
    from memcli.providers.reranker import Reranker
    from memcli.providers.splade import SpladeEncoder
    from memcli.store.connection import Database
    from memcli.store.filters import Filters
    from memcli.store.owner import Owner


class MemoryHandle(Protocol):
    db: Database
    embedder: Embedder | None
    sparse: SpladeEncoder | None
    reranker: Reranker | None  # reorders a query's fused top N (memcli.retrieval.rerank)
    tenant: str  # the tenant of every read and write that names none
    encoding: str  # the tokenizer that counts a bundle's tokens
    lifecycle: LifecycleSettings
    retrieval: RetrievalSettings
    categories: Categories

    def reader(self) -> Database | None:
        """A second, read-only connection for a leg that runs beside the main one (or None)."""
        ...

    def owner(self, tenant_id: str | None = None) -> Owner:
        """Whose rows a command on one id may touch."""
        ...

    def filters(self, agent: str | None = None, *, all_tenants: bool = False,
                **kwargs: Any) -> Filters:
        """Filters for a query, with the agent's category allowlist enforced."""
        ...

    def embed_pending(self, batch_size: int = 256, progress: Progress | None = None) -> int:
        """Vectors (and sparse terms) for the memories stored without them; how many."""
        ...
