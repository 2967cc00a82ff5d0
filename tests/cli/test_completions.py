"""The committed completion scripts are the ones the app generates (regenerate if this fails)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("gen", ROOT / "completions" / "generate.py")
gen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen)


@pytest.mark.parametrize("shell", sorted(gen.SHELLS))
def test_completion_script_is_current(shell):
    committed = (ROOT / "completions" / gen.SHELLS[shell]).read_text(encoding="utf-8")
    rendered = gen.render(shell)
    assert "memcli" in rendered
    assert committed == rendered, "run: python completions/generate.py"
