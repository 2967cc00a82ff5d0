"""Who said it: an event's actor type, a memory's `actor_type`, the `role` filter."""

from __future__ import annotations

# One vocabulary on every write path: the Agent Memory System PRD's (section 6.1,
# events.actor_type: human, agent, tool; system for a client's own instructions). The chat
# spelling (user, assistant), which chat exports, the agent hooks and MCP clients use, is
# accepted everywhere and stored as its PRD word, so `--role user` and `--role human` find the
# same turns. Schema 8 rewrote the rows older versions stored in the chat spelling.
ROLE_ALIASES = {"user": "human", "assistant": "agent"}
ROLES = ("human", "agent", "tool", "system")


def canonical_role(role: str) -> str:
    """The stored spelling of an actor type: `user` is `human`, `assistant` is `agent`; any
    other type (tool, system, a caller's own) as given."""
    return ROLE_ALIASES.get(role, role)
