"""The `meta` key/value table, read and written the same way on every engine."""

from __future__ import annotations


class MetaRows:
    """`get_meta`/`set_meta` for a Database class whose `scalar`/`execute` take portable SQL
    (memcli.store.sqlite.connection.Database, memcli.store.postgres.connection.PgDatabase)."""

    def get_meta(self, key: str) -> str | None:
        return self.scalar("SELECT value FROM meta WHERE key = ?", (key,))  # type: ignore[attr-defined]

    def set_meta(self, key: str, value: str) -> None:
        self.execute(  # type: ignore[attr-defined]
            "INSERT INTO meta (key, value) VALUES (?, ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (key, value),
        )
