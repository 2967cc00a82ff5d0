"""Progress bars for humans: a rich bar on stderr when stderr is a terminal, nothing otherwise.

`progress_bar()` yields the callback a library operation takes (memcli/core/progress.py), or None
when no one is watching: stderr is a pipe or a file (cron, CI, an agent), or the terminal is
`TERM=dumb`. rich decides what a terminal is (it also honours FORCE_COLOR / TTY_COMPATIBLE
for a user who wants bars through a pager). stdout is never touched: the JSON payload stays
byte-identical with or without a bar, and the bar is erased when the operation ends.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from memcli.core.progress import Progress


@contextmanager
def progress_bar(*, quiet: bool = False) -> Iterator[Progress | None]:
    """A callback drawing one bar per stage on stderr, or None (quiet, or not a terminal)."""
    if quiet:
        yield None
        return
    from rich.console import Console

    console = Console(stderr=True)
    if not console.is_terminal or console.is_dumb_terminal:
        yield None
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    bar = Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
        TimeElapsedColumn(), TimeRemainingColumn(),
        console=console, transient=True,
        # Never wrap stdout: the payload is printed after the bar, byte for byte as on a pipe.
        redirect_stdout=False, redirect_stderr=False,
    )
    tasks: dict[str, int] = {}

    def update(stage: str, done: int, total: int | None) -> None:
        task = tasks.get(stage)
        if task is None:
            task = tasks[stage] = bar.add_task(stage, total=total)
        bar.update(task, completed=done, total=total)

    with bar:
        yield update
