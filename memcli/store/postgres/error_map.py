"""psycopg errors to memcli's one-line errors, by SQLSTATE (the PostgreSQL twin of
`environment_error` in memcli/store/sqlite/error_map.py).

Only failures of the environment, and lock waits, are translated: a busy database is exit 75
(cron retries), a refused connection, login, privilege or full disk is a StorageError (exit 1)
naming the server and database with the password masked. Everything else (a constraint
violation, a syntax error) stays the psycopg exception it is, for the caller or the bug report.

A statement the server cancelled (57014: past `statement_timeout`, or at a cancel request,
`pg_cancel_backend` by an administrator or a client's own) is not a busy database, and its
message says which it was; it stays exit 75 (HTTP 503 in the daemon) all the same: its
transaction was rolled back, nothing of it stays half-written, and running it again may
succeed (a quieter server, no administrator cancelling), which is what EX_TEMPFAIL tells cron.
memcli's own waits never cancel a statement: they end with lock_timeout (55P03).
"""

from __future__ import annotations

import psycopg

from memcli.errors import (
    DatabaseBusyError,
    DiskFullError,
    MemcliError,
    NoDatabaseError,
    StorageError,
    UsageError,
    ValidationError,
)

BUSY_HINT = "retry later, or wait longer with MEMCLI_BUSY_TIMEOUT=<seconds>"
# 55P03 lock_not_available: memcli's wait for the writer lock (lock_timeout) ran out.
_WAIT = {"55P03"}
# 57014 query_canceled: statement_timeout, or a cancel request (pg_cancel_backend, a client's).
_CANCELLED = "57014"
# 40001 serialization_failure, 40P01 deadlock_detected: the transaction lost a race with
# another writer and was rolled back; running it again is safe, which is what exit 75 says.
_RACE = {"40001", "40P01"}


def first_line(exc: BaseException) -> str:
    """libpq's message without its "connection failed:" framing and indented hints."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    for prefix in ("connection failed: ", "FATAL:  ", "ERROR:  "):
        if text.startswith(prefix):
            text = text[len(prefix):]
    return text


def busy(waited: float) -> DatabaseBusyError:
    return DatabaseBusyError(
        f"database is busy: another process held its write lock for {waited:g} s", BUSY_HINT)


def cancelled(exc: BaseException) -> DatabaseBusyError:
    """A statement the server cancelled, saying why when the server's message does (its
    English text; another `lc_messages` gets the general wording)."""
    text = first_line(exc)
    if "statement timeout" in text:
        return DatabaseBusyError(
            "the server cancelled the statement: it ran longer than this role's or "
            "database's statement_timeout (its transaction was rolled back)",
            "retry later, or raise statement_timeout for this role "
            "(ALTER ROLE ... SET statement_timeout)")
    if "user request" in text:
        return DatabaseBusyError(
            "the server cancelled the statement at a cancel request (an administrator's "
            "pg_cancel_backend, or the client's own; its transaction was rolled back)",
            "run the command again")
    return DatabaseBusyError(
        f"the server cancelled the statement (statement_timeout or a cancel request): {text}",
        "run the command again; if it keeps happening, ask the DBA about statement_timeout")


def mapped(exc: BaseException, shown: str, waited: float) -> MemcliError | None:
    """The memcli error for psycopg error `exc` on database `shown` (masked), or None."""
    state = getattr(exc, "sqlstate", None) or ""
    if state in _WAIT:
        return busy(waited)
    if state == _CANCELLED:
        return cancelled(exc)
    if state in _RACE:
        return DatabaseBusyError(
            f"database is busy: a concurrent write conflicted with this one "
            f"({'deadlock' if state == '40P01' else 'serialization failure'}; nothing was "
            "written)", "run the command again")
    if state.startswith("08") or (not state and _is_operational(exc)):
        return StorageError(f"lost the connection to {shown}: {first_line(exc)}",
                            "check that the server is running and reachable")
    if state.startswith("28"):
        return StorageError(f"cannot log in to {shown}: {first_line(exc)}",
                            "check the user and password (PGPASSWORD or ~/.pgpass)")
    if state == "3D000":
        return NoDatabaseError(f"no database at {shown}: {first_line(exc)}",
                               "check --db; a DBA creates the database (createdb), memcli "
                               "then creates its tables in it")
    if state == "42501" and "row-level security" in str(exc):
        return UsageError(f"this login role writes only its own tenant's rows: "
                          f"{first_line(exc)}", "leave the tenant unset or give the role's "
                          "tenant (memcli pg grant-tenant bound it)")
    if state == "42501":
        return StorageError(f"permission denied on {shown}: {first_line(exc)}",
                            "grant this user rights on memcli's schema and tables")
    if state in ("53100", "53000"):
        return DiskFullError(f"disk full: cannot write {shown}", "free space on the server")
    if state == "25006":
        return StorageError(f"database is read-only: {shown}",
                            "this connection or server only allows reads")
    if state == "22021":  # character_not_in_repertoire: U+0000 in a text parameter

        return ValidationError("text contains a NUL character (U+0000), which PostgreSQL "
                               "cannot store", "remove it from the input")
    # Migrations guarantee every table at open, so a missing one was dropped by hand.
    if state == "42P01":
        return StorageError(f"database is damaged: {shown}: {first_line(exc)}",
                            "run `memcli doctor`; `memcli rebuild` restores derived tables")
    return None


def _is_operational(exc: BaseException) -> bool:
    return isinstance(exc, psycopg.OperationalError)


def connect_error(exc: BaseException, shown: str, *, must_exist: bool) -> MemcliError:
    """The one-line error for a failed `psycopg.connect` (no SQLSTATE for a refused socket)."""
    state = getattr(exc, "sqlstate", None) or ""
    text = first_line(exc)
    if state == "3D000" or ("database" in text and "does not exist" in text):
        if must_exist:
            return NoDatabaseError(f"no memcli database at {shown}: {text}",
                                   "check --db or MEMCLI_DB")
        return StorageError(f"cannot open {shown}: {text}",
                            "a DBA creates the database (createdb); memcli then creates "
                            "its tables in it")
    if state.startswith("28") or "authentication failed" in text or "password" in text:
        return StorageError(f"cannot log in to {shown}: {text}",
                            "check the user and password (PGPASSWORD or ~/.pgpass)")
    other = mapped(exc, shown, 0.0) if state and not state.startswith("08") else None
    return other or StorageError(
        f"cannot connect to {shown}: {text}",
        "check that the server is running and the host, port and database in --db")
