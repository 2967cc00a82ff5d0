"""The repository's own text names what it cites and speaks of the product.

The design documents memcli implements are named for what they are (docs/design/sources.md
lists them), never by a file number that nothing in the repository defines; docs and docstrings
keep decisions and measurements, not the order the work was done in.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ROOT / "docs" / "design" / "sources.md"
DOCUMENTS = ("the memory system spec", "the app-memory design", "the evolution plan",
             "the Agent Memory System PRD", "the SQLite memory extension design")

# What the text must not say: a design document by its file number (the word "seed" before
# 000-004, with a space, a hyphen or nothing between), or a diary of the work (numbered work
# sessions or steps).
UNDEFINED = re.compile(r"\bseeds?[ -]?0\d\d|\bsession [0-9]|\bstep [0-9]", re.IGNORECASE)


def _texts() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "CHANGELOG.md", *(ROOT / "docs").rglob("*.md")]
    for folder in ("memcli", "bench"):
        files += [p for p in (ROOT / folder).rglob("*") if p.suffix in (".py", ".md")]
    return [p for p in files if p.is_file() and "__pycache__" not in p.parts]


def test_the_text_names_documents_and_keeps_no_diary() -> None:
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
             for path in _texts()
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if UNDEFINED.search(line)]
    assert found == [], "\n".join(found)


@pytest.mark.parametrize("name", DOCUMENTS)
def test_each_design_document_is_cited(name: str) -> None:
    text = SOURCES.read_text(encoding="utf-8")
    assert f"| {name} |" in text
