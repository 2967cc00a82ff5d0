"""Session ownership: a session id belongs to one user of its tenant, never two.

The `sessions` table is keyed by (tenant, session id) and so are the session's readers (the
recent window, the previous-turn context key, consolidation, checkpoints by thread). Rather than
re-key all of them, ingest refuses a record whose session already belongs to someone else.
The first record of a session fixes its user; "no user" counts as a user of its own, so an
anonymous record cannot join a user's session, nor a user's record an anonymous one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memcli.errors import ValidationError
from memcli.store.batching import chunks

if TYPE_CHECKING:
    from memcli.store.connection import Database

_NOBODY = object()


def check_session_user(db: Database, tenant_id: str, session_id: str | None,
                       user_id: str | None,
                       owners: dict[tuple[str, str], object] | None = None) -> None:
    """Raise ValidationError when `session_id` belongs to another user than `user_id` in this
    tenant. Called inside the write transaction, before the record's rows, so two writers cannot
    both claim a new session.

    `owners`: a cache of (tenant, session) -> owner a caller writing many records in one
    transaction passes in, so a session's later records cost no lookup (it must drop the
    cache when a savepoint that filled it is rolled back). A record that passes owns its
    session from then on (its own, or the first record's, which it matches)."""
    if session_id is None:
        return
    key = (tenant_id, session_id)
    if owners is not None and key in owners:
        owner: object = owners[key]
    else:
        row = db.execute(
            "SELECT user_id FROM sessions WHERE tenant_id = ? AND session_id = ?",
            (tenant_id, session_id),
        ).fetchone()
        owner = _NOBODY if row is None else row[0]
    if owner is _NOBODY or owner == user_id:
        if owners is not None:
            owners[key] = user_id
        return
    whose = "a user" if owner is not None else "no user"
    asked = f"user {user_id!r}" if user_id is not None else "no user"
    raise ValidationError(
        f"session {session_id!r} of tenant {tenant_id!r} belongs to {whose}, this record "
        f"to {asked}: a session never mixes users",
        "use a session id of this user's own",
    )


def load_owners(db: Database, keys: list[tuple[str, str]],
                owners: dict[tuple[str, str], object]) -> None:
    """Fill `check_session_user`'s cache with the owners of these (tenant, session) keys, in
    one statement per 200 (ingest looks up a whole batch's sessions at once); a session with
    no row yet is cached as unclaimed. Keys already cached are left alone."""
    todo = [k for k in dict.fromkeys(keys) if k not in owners]
    for part in chunks(todo, 200):
        where = " OR ".join(["(tenant_id = ? AND session_id = ?)"] * len(part))
        found = {(t, s): u for t, s, u in db.execute(
            f"SELECT tenant_id, session_id, user_id FROM sessions WHERE {where}",
            [v for key in part for v in key])}
        for key in part:
            owners[key] = found.get(key, _NOBODY)


def session_owner(db: Database, session_id: str, tenant_id: str | None) -> str | None:
    """The user a session belongs to in `tenant_id`; across every tenant (None), the one user
    all the session ids of that name share, else None (do not guess whose memories to read)."""
    if tenant_id is not None:
        return db.scalar(
            "SELECT user_id FROM sessions WHERE tenant_id = ? AND session_id = ?",
            (tenant_id, session_id),
        )
    users = {r[0] for r in db.execute(
        "SELECT user_id FROM sessions WHERE session_id = ?", (session_id,))}
    return users.pop() if len(users) == 1 else None


def unseen_sessions(db: Database, keys: list[tuple[str, str]]) -> set[tuple[str, str]]:
    """Of these (tenant, session) keys, those with no row in `sessions` yet: sessions the next
    write starts."""
    owners: dict[tuple[str, str], object] = {}
    load_owners(db, keys, owners)
    return {key for key, owner in owners.items() if owner is _NOBODY}
