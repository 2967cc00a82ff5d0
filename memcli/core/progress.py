"""Progress of long library operations, reported through a plain callback (no UI here).

A long operation (ingest of many records, embed, reindex, consolidate, rebuild) takes
`progress: Progress | None` and calls it as `progress(stage, done, total)`: `stage` a short
label ("embedding"), `done` how many units of that stage are finished so far (cumulative, not
an increment), `total` how many there will be (None when unknown). The library never imports
rich: the CLI passes a callback that draws a bar on a terminal (memcli/cli/progress_bar.py), or
None on a pipe or under cron, and then nothing is reported at all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

Progress = Callable[[str, int, "int | None"], None]
T = TypeVar("T")


def report(progress: Progress | None, stage: str, done: int, total: int | None) -> None:
    """Call the callback, if there is one."""
    if progress is not None:
        progress(stage, done, total)


def slices(items: Sequence[T], size: int, progress: Progress | None,
           stage: str) -> Iterator[Sequence[T]]:
    """`items` in slices of `size`, reporting each finished slice (and 0 of n first, so the bar
    appears before the first slice's work)."""
    total = len(items)
    report(progress, stage, 0, total)
    for start in range(0, total, size):
        yield items[start:start + size]
        report(progress, stage, min(start + size, total), total)
