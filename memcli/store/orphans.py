"""Rows without their partner row (an anti-join), written one way for every caller: doctor's
orphan and missing-row checks and its repairs, rebuild, purge, import, and the SQLite backend's
FTS5 and vec0 consistency checks.

A "link" is (column, partner table, partner key): the row is an orphan on that link when no
partner row has `key` = `column`. The condition is `NOT EXISTS (SELECT 1 ...)`, never
`NOT IN (SELECT ...)`: PostgreSQL plans NOT EXISTS as a hashed or merged anti-join, but runs a
NOT IN whose list outgrows work_mem as a quadratic rescan (doctor did not finish at 200k
memories), and NOT IN yields nothing at all once the list holds a NULL. SQLite answers both
by one index probe per row (on vec0's primary key ~7 us a row, ~3x its NOT IN, only in
`sync_vec_index`'s rare catch-up).

Table, column and key names come from this package's code, never from users.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from memcli.store.connection import Database

# (column of the outer row, e.g. "memory_vectors.memory_id"; partner table; partner's key)
Link = tuple[str, str, str]


def lacking(column: str, partner: str, key: str = "id", *, also: str = "") -> str:
    """SQL condition: no row of `partner` has `key` = `column` (a qualified column of the
    outer query). `also` narrows the partner rows (it may name them as `partner.`)."""
    extra = f" AND {also}" if also else ""
    return (f"NOT EXISTS (SELECT 1 FROM {partner} partner"
            f" WHERE partner.{key} = {column}{extra})")


def _any_lacking(links: tuple[Link, ...]) -> str:
    assert links, "at least one link"
    return " OR ".join(lacking(*link) for link in links)


def ids_lacking(db: Database, table: str, *links: Link, pick: str | None = None,
                where: str = "", distinct: bool = False, order: bool = False) -> list[int]:
    """Ids of `table`'s rows without a partner on any of `links`: the value of `pick` (by
    default the first link's column), `where` narrowing the rows checked. `distinct`: each
    value once, probed once (SQLite's postings: 9.4M rows of 100k memories, 25 -> 4 s)."""
    pick = pick or links[0][0]
    if distinct:  # each value probed once, not once per row: the rows are deduplicated first
        columns = sorted({c.rsplit(".", 1)[-1] for c in (pick, *(link[0] for link in links))})
        narrowed = f" WHERE {where}" if where else ""
        source = f"(SELECT DISTINCT {', '.join(columns)} FROM {table}{narrowed}) AS {table}"
        cond = _any_lacking(links)
    else:
        source = table
        cond = f"({where}) AND ({_any_lacking(links)})" if where else _any_lacking(links)
    sql = f"SELECT {pick} FROM {source} WHERE {cond}" + (f" ORDER BY {pick}" if order else "")
    return [int(r[0]) for r in db.execute(sql)]


def delete_lacking(db: Database, table: str, *links: Link) -> int:
    """Delete `table`'s rows without a partner on any of `links`; the number deleted."""
    return db.change_count(f"DELETE FROM {table} WHERE {_any_lacking(links)}")


# Entities no memory mentions any more (purge, rebuild and doctor --fix delete them: derived text).
UNUSED_ENTITIES: tuple[str, Link] = ("entities", ("entities.id", "memory_entities", "entity_id"))
# `also` for a history partner: the memory was purged (history keeps its PURGE row).
PURGED = "partner.op = 'PURGE'"
