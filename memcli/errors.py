"""Error tree for memcli: every error knows the exit code the CLI maps it to.

Only `memcli.cli` turns these into exit codes and one-line messages; the library raises them.
"""

from __future__ import annotations


class MemcliError(Exception):
    """Base of every error memcli raises on purpose."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:  # one line: "<what> (<hint>)"
        return f"{self.message} ({self.hint})" if self.hint else self.message


class UsageError(MemcliError):
    """Bad input or flags: exit 2."""

    exit_code = 2


class ValidationError(UsageError):
    """An input record failed validation."""


class NotAllowedError(UsageError):
    """A request outside an agent's category allowlist."""


class NotFoundError(MemcliError):
    """A memory, event or artifact id that does not exist."""

    exit_code = 1


class SchemaError(MemcliError):
    """The database file is newer than this code, or not a memcli database."""

    exit_code = 1


class EmbedderMismatchError(MemcliError):
    """Stored vectors were made by another model than the configured one."""

    exit_code = 1


class DatabaseBusyError(MemcliError):
    """Another process holds the write lock longer than busy_timeout: exit 75 (EX_TEMPFAIL)."""

    exit_code = 75


class NoDatabaseError(MemcliError):
    """A read command pointed at a path with no memcli database: nothing is created there."""

    exit_code = 1


class StorageError(MemcliError):
    """The environment refuses the database: read-only file or folder, disk full, I/O error.
    Exit 1 (a runtime failure, not bad input: the same command works once that is fixed)."""

    exit_code = 1


class DiskFullError(StorageError):
    """The disk (or the database's size limit) is full: exit 1, HTTP 507 Insufficient Storage.
    Nothing of the failed write stays; the same request works once space is freed."""


def validation_line(exc: Exception | list[dict], what: str | None = None, *,
                    where: str = "request") -> str:
    """A pydantic ValidationError as one line: `bad <what>: <field>: <message>` for its first
    problem, `(and N more)` when there are others. `what` None leaves
    out the `bad <what>: ` prefix; `where` names a problem at the root of the input. Every
    model memcli validates (requests, records, settings) is reported through this one rule;
    `exc` may be the error's list of problems (`exc.errors()`) too."""
    problems = exc if isinstance(exc, list) else exc.errors()  # type: ignore[attr-defined]
    first = problems[0]
    place = ".".join(str(p) for p in first["loc"]) or where
    message = first["msg"].removeprefix("Value error, ")
    more = len(problems) - 1
    tail = f" (and {more} more)" if more else ""
    prefix = f"bad {what}: " if what else ""
    return f"{prefix}{place}: {message}{tail}"
