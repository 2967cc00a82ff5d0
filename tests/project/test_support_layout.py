"""The tests' and benchmarks' shared code is imported by its dotted name (`tests.support.x`,
`bench.x`), never found through a `sys.path` edit, and the CLI runner uses Typer's public API."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PATH_EDIT = re.compile(r"sys\.path\.(insert|append|extend)\(|sys\.path\s*(\+=|=)")


def _sources() -> list[Path]:
    return sorted(p for folder in ("tests", "bench") for p in (ROOT / folder).rglob("*.py"))


def test_no_file_in_tests_or_bench_edits_sys_path():
    edits = [f"{p.relative_to(ROOT)}:{n}" for p in _sources()
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if PATH_EDIT.search(line) and p != Path(__file__).resolve()]
    assert edits == []


def test_no_test_replaces_a_private_name_of_typer():
    private = re.compile(r"typer\.(testing|main)\._\w+")
    uses = [f"{p.relative_to(ROOT)}:{n}" for p in _sources()
            for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
            if private.search(line) and p != Path(__file__).resolve()]
    assert uses == []


@pytest.mark.long  # a child importing every bench module
def test_support_and_benchmarks_import_by_name_from_another_folder(tmp_path):
    """A fresh interpreter in an unrelated working folder, with the repository root on its path
    (as `python -m bench.x` run from the root has, and the editable install gives), imports
    every bench module and every support module by its dotted name."""
    names = [f"bench.{p.stem}" for p in sorted((ROOT / "bench").glob("*.py"))
             if p.stem != "__init__"]
    names += [f"tests.support.{p.stem}" for p in sorted((ROOT / "tests" / "support").glob("*.py"))
              if p.stem != "__init__"]
    code = ("import importlib, sys\nfor name in sys.argv[1:]:\n"
            "    importlib.import_module(name)\nprint(len(sys.argv) - 1)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code, *names], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(len(names))
    assert len(names) > 40
