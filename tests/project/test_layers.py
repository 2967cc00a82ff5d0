"""The layer contract holds: imports go down the layers of pyproject.toml's [tool.importlinter]
(cli -> service -> viewer -> operations -> domain -> store -> providers -> policy -> core), no
modules of a package import each other in a loop, and annotations (imports under
TYPE_CHECKING, which the import-linter contracts leave out because they never run) respect the
layers too: domain code names `MemoryHandle` (memcli.store.handle), never the `Memory` facade
above it."""

from __future__ import annotations

import tomllib
from pathlib import Path

import grimp
import pytest
from importlinter import cli as importlinter_cli

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "pyproject.toml"


def _linter() -> dict:
    return tomllib.loads(CONFIG.read_text(encoding="utf-8"))["tool"]["importlinter"]


def test_the_import_contracts_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """`lint-imports` over the whole package: exit 0 means every contract is kept."""
    monkeypatch.chdir(ROOT)
    assert importlinter_cli.lint_imports(config_filename=str(CONFIG), no_cache=True,
                                         no_logo=True) == 0


def _layers(graph: grimp.ImportGraph, contract: dict) -> list[grimp.Layer]:
    """The contract's layers as grimp takes them; an optional layer `(name)` that does not
    exist (yet) is left out."""
    out = []
    for raw in contract["layers"]:
        sep = "|" if "|" in raw else ":"
        tails = []
        for tail in (t.strip() for t in raw.split(sep)):
            optional = tail.startswith("(")
            name = tail.strip("()")
            if optional and name not in graph.modules:
                continue
            tails.append(name)
        if tails:
            out.append(grimp.Layer(*tails, independent=sep == "|"))
    return out


def test_annotations_respect_the_layers_too() -> None:
    """The layers contract again, over a graph that keeps TYPE_CHECKING imports."""
    contract = next(c for c in _linter()["contracts"] if c["type"] == "layers")
    graph = grimp.build_graph("memcli", exclude_type_checking_imports=False, cache_dir=None)
    for ignored in contract.get("ignore_imports", []):
        importer, imported = (s.strip() for s in ignored.split("->"))
        if graph.direct_import_exists(importer=importer, imported=imported):
            graph.remove_import(importer=importer, imported=imported)
    illegal = graph.find_illegal_dependencies_for_layers(layers=_layers(graph, contract))
    wrong = sorted(
        f"{dep.importer} -> {dep.imported}: {[route.heads for route in dep.routes]}"
        for dep in illegal)
    assert wrong == []


def test_the_contract_names_every_package() -> None:
    """A new package under memcli/ takes its place in the layers (or is config/errors-like:
    a module at the top, which only __init__, __main__, config and errors may be)."""
    contract = next(c for c in _linter()["contracts"] if c["type"] == "layers")
    named = {t.strip().strip("()") for raw in contract["layers"]
             for t in raw.replace("|", ":").split(":")}
    top = {p.stem if p.suffix == ".py" else p.name for p in (ROOT / "memcli").iterdir()
           if (p.suffix == ".py" or (p / "__init__.py").exists())}
    unplaced = sorted(f"memcli.{name}" for name in top
                      if f"memcli.{name}" not in named
                      and name not in {"__init__", "__main__", "config", "errors", "weights"})
    assert unplaced == []


def test_a_module_name_repeats_only_across_the_engines() -> None:
    """Two modules share a name only as one interface's implementations: store/x.py (the
    shared half or the Protocol), store/sqlite/x.py and store/postgres/x.py."""
    by_name: dict[str, list[str]] = {}
    for path in sorted((ROOT / "memcli").rglob("*.py")):
        if path.name != "__init__.py":
            by_name.setdefault(path.name, []).append(path.relative_to(ROOT).as_posix())
    engines = {"memcli/store", "memcli/store/sqlite", "memcli/store/postgres"}
    repeated = {name: paths for name, paths in by_name.items() if len(paths) > 1
                and not all(p.rsplit("/", 1)[0] in engines for p in paths)}
    assert repeated == {}
