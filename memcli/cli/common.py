"""Opening the memory for a command: settings from flags/env/config, then the library."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from memcli.cli.output import warn

if TYPE_CHECKING:
    from memcli.memory import Memory


def open_memory(db: Path | None, *, with_embedder: bool = True,
                check_embedder: bool = True) -> Memory:
    from memcli.config import load_settings
    from memcli.memory import Memory, make_embedder

    settings = load_settings(db)
    embedder = make_embedder(settings) if with_embedder else None
    memory = Memory.open(settings.db, embedder=embedder, settings=settings,
                         check_embedder=check_embedder)
    if memory.db.vec_warning:
        warn(memory.db.vec_warning)
    return memory
