"""One encode at a time on a model, document encodes before query batches.

A batch of queries (memcli/providers/query_batches.py) holds a model several times longer than one
query, and a document encode that waited behind batches saw its p95 rise 1.4-1.6x
(docs/design/query-batching.md). So when the model frees, a waiting document encode goes before
the next batch. Kept apart from the batcher so that importing an embedder stays cheap (no
concurrent.futures, no logging).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class ModelLock:
    """One encode at a time on a model; urgent holders (document encodes) go first.

    When the lock frees, an urgent waiter takes it before any other; among waiters of the same
    kind the order is the operating system's. A running holder is never interrupted."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._held = False
        self._waiting = {True: 0, False: 0}

    @contextmanager
    def hold(self, urgent: bool = False) -> Iterator[None]:
        with self._cond:
            self._waiting[urgent] += 1
            try:
                while self._held or (not urgent and self._waiting[True]):
                    self._cond.wait()
            finally:
                self._waiting[urgent] -= 1
            self._held = True
        try:
            yield
        finally:
            with self._cond:
                self._held = False
                self._cond.notify_all()

    def waiting(self, urgent: bool) -> int:
        """How many holders of the kind wait for the lock (for tests and status)."""
        with self._cond:
            return self._waiting[urgent]
