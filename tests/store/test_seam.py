"""The store seam: what retrieval hands the legs (a LexicalQuery, no engine
syntax), where engine-specific code may live, how a location reaches the opener."""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

import pytest

from memcli.cli.app import app
from memcli.config import Settings
from memcli.retrieval.text import MAX_QUERY_TERMS, lexical_query
from memcli.service.daemon import paths
from memcli.store.backend import LexicalQuery
from memcli.store.sqlite.fts import fts_match, trigram_match
from tests.support.cli import CliRunner

PACKAGE = Path(__file__).resolve().parents[2] / "memcli"

# -- LexicalQuery -------------------------------------------------------------------------------


def test_terms_drop_stopwords_and_repeats_keep_order():
    query = lexical_query("What did Anika say about the Berlin trip? Anika, BERLIN!")
    assert query.terms == ("anika", "say", "berlin", "trip")
    assert query.grams == ()


def test_a_query_of_stopwords_only_keeps_its_words():
    assert lexical_query("Who is it?").terms == ("who", "is", "it")
    assert lexical_query("  ?! ").terms == ()


def test_cjk_runs_give_distinct_three_grams_not_terms():
    query = lexical_query("我喜欢喝咖啡 and tea, 咖啡店")
    assert query.terms == ("tea",)  # CJK runs are never word terms ("and": a stopword)
    assert query.grams == ("我喜欢", "喜欢喝", "欢喝咖", "喝咖啡", "咖啡店")
    # A run shorter than a gram is a gram of its own (each engine matches it as a substring).
    assert lexical_query("咖啡").grams == ("咖啡",)


def test_terms_and_grams_are_bounded():
    words = " ".join(f"w{i}" for i in range(3 * MAX_QUERY_TERMS))
    cjk = "".join(chr(0x4E00 + i) for i in range(3 * MAX_QUERY_TERMS))
    query = lexical_query(f"{words} {cjk} 又一个词")
    assert query.terms == tuple(f"w{i}" for i in range(MAX_QUERY_TERMS))
    assert len(query.grams) == MAX_QUERY_TERMS
    assert query.grams[0] == cjk[:3]


def test_fts5_rendering_quotes_every_term():
    query = LexicalQuery(terms=('say"', "near", "or"), grams=('a"b',))
    assert fts_match(query) == '"say""" OR "near" OR "or"'
    assert trigram_match(query) == '"a""b"'
    assert fts_match(LexicalQuery()) is None and trigram_match(LexicalQuery()) is None


# -- layering -----------------------------------------------------------------------------------
# Library code reaches SQLite only through memcli.store (db.backend / db.dialect). The daemon's
# WAL checkpoint on exit and its keep-open connection are SQLite's own business (holder.py:
# what the daemon holds open per engine).
ALLOWED = {"memcli/service/holder.py"}
# Inside memcli/store, the portable modules stay engine-free too, except the two that name the
# engine on purpose: connection.py (the Database import path) and location.py (the opener).
STORE_ALLOWED = {"memcli/store/connection.py", "memcli/store/opener.py"}


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _engine_specific(name: str) -> bool:
    return name == "apsw" or name.startswith(("apsw.", "memcli.store.sqlite", "sqlite_vec"))


def test_only_the_store_imports_the_sqlite_engine():
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).as_posix()
        if rel.startswith("memcli/store/sqlite/") or rel in ALLOWED | STORE_ALLOWED:
            continue
        found = sorted(n for n in _imports(path) if _engine_specific(n))
        if found:
            wrong.append((rel, found))
    assert wrong == []


def test_the_layering_check_sees_imports():
    """The check above would catch the old importer (it caught apsw errors itself)."""
    assert _engine_specific("apsw") and _engine_specific("memcli.store.sqlite.fts")
    assert not _engine_specific("memcli.store.search_sql")
    sample = PACKAGE / "store" / "sqlite" / "backend.py"
    assert "apsw" in _imports(sample)


# -- locations ----------------------------------------------------------------------------------
def test_settings_keep_a_url_as_typed():
    """A Path folds `//` (`postgresql://h/db` -> `postgresql:/h/db`): the location is a str."""
    assert Settings(db="postgresql://h/db").db == "postgresql://h/db"
    assert Settings(db=Path("/tmp/m.db")).db == "/tmp/m.db"


@pytest.mark.usefixtures("fast_cli")
def test_db_flag_reaches_the_refusal_as_typed(tmp_path, monkeypatch):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    runner = CliRunner()
    for typed in ("mysql://h/db", "mysql://h//db"):
        result = runner.invoke(app, ["stats", "--db", typed])
        assert result.exit_code == 2
        assert result.stderr.startswith(f"memcli: error: --db {typed} is a URL memcli"), \
            result.stderr
    assert list(cwd.iterdir()) == []


def test_daemon_key_of_a_url_is_the_hash_of_the_url(tmp_path):
    url = "postgresql://agent@127.0.0.1:5432/memory"
    expected = hashlib.sha256(url.encode()).hexdigest()[:16]
    assert paths.db_key(url, cwd=str(tmp_path)) == expected
    assert paths.db_key(url, cwd="/") == expected  # not a path: the folder does not matter
    dsn = "host=127.0.0.1 dbname=memory"
    assert paths.db_key(dsn, cwd="/") == hashlib.sha256(dsn.encode()).hexdigest()[:16]
    # Files still meet at one daemon by their real path.
    (tmp_path / "m.db").touch()
    assert paths.db_key("m.db", cwd=str(tmp_path)) == paths.db_key(str(tmp_path / "m.db"))


def test_both_spellings_of_the_url_scheme_reach_one_daemon():
    """libpq takes `postgres://` and `postgresql://` (any case) for the same database: one
    routing key, so one daemon. Anything that may name another server keeps its own key."""
    url = "postgresql://agent@127.0.0.1:5432/memory"
    for spelling in ("postgres://agent@127.0.0.1:5432/memory",
                     "POSTGRES://agent@127.0.0.1:5432/memory",
                     "PostgreSQL://agent@127.0.0.1:5432/memory"):
        assert paths.db_key(spelling, cwd="/") == paths.db_key(url, cwd="/"), spelling
    others = ("postgresql://agent@127.0.0.1/memory",  # PGPORT decides, where the daemon runs
              "postgresql://agent@127.0.0.1:5433/memory", "postgresql://agent@127.0.0.1:5432/Memory",
              "postgres://other@127.0.0.1:5432/memory", "mysql://agent@127.0.0.1:5432/memory")
    keys = {paths.db_key(u, cwd="/") for u in (url, *others)}
    assert len(keys) == 1 + len(others)


def test_the_client_knows_server_locations_as_the_store_does():
    from memcli.core import locations as location

    assert paths._URL == location._URL.pattern and paths._DSN == location._DSN.pattern
    assert paths._DSN_KEY == location._DSN_KEY.pattern
    for text in ("postgresql://h/db", "POSTGRES://h/db", "file:x.db", "host=h dbname=d",
                 "memory.db", "C:/data/m.db", "a=b.db", "./x://y.db", "service=memcli"):
        server = location.is_url(text) or location.is_dsn(text)
        assert paths._is_server_location(text) == server, text


# SQL only SQLite runs: none of it may appear in the portable store modules' statements (the
# engine's spelling comes from db.backend / db.dialect). Docstrings and comments may name it.
SQLITE_ONLY = ("PRAGMA", "sqlite_schema", "sqlite_master", "pragma_table", " MATCH ", "bm25(",
               "vec_distance", "vec_quantize", "julianday(", "json_extract(", "json_valid(",
               "group_concat(", "CROSS JOIN", "memories_fts", "memories_trigram", "vec_memories",
               "last_insert_rowid", "INSERT OR ")


def _code_strings(tree: ast.AST) -> list[str]:
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef)
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    return [node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docstrings]


def test_portable_store_modules_hold_no_sqlite_only_sql():
    wrong = []
    for path in sorted((PACKAGE / "store").glob("*.py")):
        rel = path.relative_to(PACKAGE.parent).as_posix()
        if rel in STORE_ALLOWED:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for text in _code_strings(tree):
            wrong.extend((rel, token) for token in SQLITE_ONLY if token in text)
        wrong.extend((rel, ".conn") for node in ast.walk(tree)
                     if isinstance(node, ast.Attribute) and node.attr == "conn")
    assert wrong == []
