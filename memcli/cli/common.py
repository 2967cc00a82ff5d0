"""Opening the memory for a command: settings from flags/env/config, then the library."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from memcli.cli.output import Format, emit, errors, resolve_format, warn

if TYPE_CHECKING:
    from memcli.cli.options import Given
    from memcli.config import Settings
    from memcli.operations.memory import Memory


def open_memory(db: str | None, *, with_embedder: bool = True, with_sparse: bool | None = None,
                check_embedder: bool = True, preload: bool = False,
                settings: Settings | None = None, must_exist: bool = False,
                exists: bool = False) -> Memory:
    """Open the configured memory; models are only constructed (they load lazily on use).

    `preload`: the command is about to query, so the models start loading on their worker
    threads right away, overlapping the database open and the SQL legs. `settings`: the
    command's `load_settings(db)` if it has them already. `must_exist`: a read command: no
    database at the path is an error (exit 1) and nothing is created; a write-protected file
    is read (access counts and metrics are skipped, with one note on stderr). `exists`: a
    command that changes what is there (a lifecycle job, a command on one id): no database
    at the path is an error too, and nothing is created."""
    from memcli.config import load_settings
    from memcli.operations.memory import Memory, make_embedder, make_sparse

    settings = settings or load_settings(db)
    embedder = make_embedder(settings) if with_embedder else None
    use_sparse = with_embedder if with_sparse is None else with_sparse
    sparse = make_sparse(settings) if use_sparse else None
    if preload:
        from memcli.retrieval.search import preload_models

        preload_models(embedder, sparse)
    memory = Memory.open(settings.db, embedder=embedder, sparse=sparse, settings=settings,
                         check_embedder=check_embedder, must_exist=must_exist or exists)
    if must_exist and memory.db.read_only:
        warn(f"database is read-only: {settings.db} (answering without recording access)")
    if memory.db.vec_warning:
        warn(memory.db.vec_warning)
    memory.db.crypto.notice = warn  # once, if `high` rows are skipped for want of a key
    return memory


def on_one(given: Given, what: str, act: Callable[[Memory, Any], Any],
           text: Callable[[Any], None], db: str | None, fmt: Format | None, as_json: bool,
           **ids: Any) -> None:
    """A command on one thing already stored (forget, restore, confirm, pin, reject): its
    request `what` with the `ids` of its arguments, the database (it must exist; no model is
    loaded), `act`'s answer printed (`text` in the terminal's format)."""
    with errors():
        req = given.request(what, **ids)
        with open_memory(db, with_embedder=False, exists=True) as memory:
            out = act(memory, req)
        emit(out, resolve_format(fmt, as_json), text)
