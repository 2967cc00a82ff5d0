"""Query filters as one SQL WHERE clause over `memories m` (never applied after the fact)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from memcli.core.roles import canonical_role
from memcli.errors import UsageError
from memcli.store.batching import marks

# The tenant of a record or a read that names none (section 9.3 of the Agent Memory System PRD:
# every query filters by tenant).
DEFAULT_TENANT = "default"



def one_tenant_or_all(tenant_id: str | None, all_tenants: bool) -> None:
    """A caller names one tenant or reads all of them, never both (a usage error, exit 2)."""
    if all_tenants and tenant_id is not None:
        raise UsageError("a tenant and all tenants exclude each other",
                         "give --tenant-id or --all-tenants, not both")

@dataclass(frozen=True)
class Filters:
    """A read's scope and conditions. The tenant is never open by omission: `tenant_id=None`
    means DEFAULT_TENANT; only `all_tenants=True` reads across tenants (and then no tenant
    may be named)."""

    tenant_id: str | None = None
    all_tenants: bool = False
    user_id: str | None = None
    written_by: str | None = None  # the writing agent (column agent_id), not the asker
    session_id: str | None = None
    app_id: str | None = None
    run_id: str | None = None
    actor_id: str | None = None
    role: str | None = None  # actor type: human, agent, tool (user, assistant: their aliases)
    categories: tuple[str, ...] = ()
    allowed_categories: tuple[str, ...] | None = None  # agent allowlist; None = all
    excluded_categories: tuple[str, ...] = ()  # restricted ones this asker may not see
    kinds: tuple[str, ...] = ()
    channels: tuple[str, ...] = ()
    sensitivities: tuple[str, ...] = ("none", "low", "high")  # secret is never returned
    pinned: bool | None = None
    importance_min: float | None = None
    importance_max: float | None = None
    updated_after: str | None = None
    updated_before: str | None = None
    # Time travel: only memories valid at this instant (valid_from <= t < valid_to) whose
    # event happened by then. Superseded memories are kept when they were valid at t: the
    # caller asks for states=("active", "superseded") (Memory.filters does).
    as_of: str | None = None
    states: tuple[str, ...] = field(default=("active",))
    # Decisions recorded on a private channel stay out (a bundle for a public or agent channel).
    hide_private_decisions: bool = False

    def __post_init__(self) -> None:
        if self.all_tenants and self.tenant_id is not None:
            raise ValueError("a tenant and all_tenants exclude each other")
        if self.tenant_id is None and not self.all_tenants:
            object.__setattr__(self, "tenant_id", DEFAULT_TENANT)
        if self.role is not None:  # `user` finds the turns stored as `human`, as on every path
            object.__setattr__(self, "role", canonical_role(self.role))

    def widen_to_user(self) -> Filters:
        return replace(self, session_id=None)

    def sql(self, alias: str = "m") -> tuple[str, list]:
        """WHERE clause text (without the keyword) and its parameters."""
        clauses: list[str] = []
        params: list = []
        for field_name, column in (
            ("tenant_id", "tenant_id"), ("user_id", "user_id"), ("written_by", "agent_id"),
            ("session_id", "session_id"), ("app_id", "app_id"), ("run_id", "run_id"),
            ("actor_id", "actor_id"),
        ):
            value = getattr(self, field_name)
            if value is not None:
                clauses.append(f"{alias}.{column} = ?")
                params.append(value)
        if self.role is not None:
            clauses.append(f"{alias}.actor_type = ?")
            params.append(self.role)
        for column, values in (
            ("category", self.categories),
            ("kind", self.kinds),
            ("channel", self.channels),
            ("sensitivity", self.sensitivities),
            ("state", self.states),
        ):
            if values:
                clauses.append(f"{alias}.{column} IN ({marks(values)})")
                params.extend(values)
        if self.allowed_categories is not None:
            allowed = self.allowed_categories
            if allowed:
                clauses.append(f"{alias}.category IN ({marks(allowed)})")
                params.extend(allowed)
            else:
                clauses.append("1 = 0")  # a boolean on every engine (PostgreSQL: not "0")
        if self.excluded_categories:
            in_list = marks(self.excluded_categories)
            clauses.append(f"coalesce({alias}.category, '') NOT IN ({in_list})")
            params.extend(self.excluded_categories)
        if self.hide_private_decisions:
            clauses.append(
                f"NOT ({alias}.channel = 'private' AND ({alias}.kind = 'decision'"
                f" OR coalesce({alias}.category, '') = 'decisions'))"
            )
        if self.pinned is not None:
            clauses.append(f"{alias}.pinned = ?")
            params.append(int(self.pinned))
        for op, value, column in (
            (">=", self.importance_min, "importance"),
            ("<=", self.importance_max, "importance"),
            (">", self.updated_after, "updated_at"),
            ("<", self.updated_before, "updated_at"),
        ):
            if value is not None:
                clauses.append(f"{alias}.{column} {op} ?")
                params.append(value)
        if self.as_of is not None:
            # Timestamps are one ISO format on both engines (memcli.core.records.format_ts), so they
            # compare as text. A memory without valid_from was valid from its event.
            clauses.append(f"{alias}.event_time <= ? AND coalesce({alias}.valid_from, "
                           f"{alias}.event_time) <= ? AND ({alias}.valid_to IS NULL "
                           f"OR {alias}.valid_to > ?)")
            params.extend([self.as_of] * 3)
        return (" AND ".join(clauses) or "1 = 1"), params
