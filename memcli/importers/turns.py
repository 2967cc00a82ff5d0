"""What a format module yields, and the checks the formats share."""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from memcli.core.records import parse_ts
from memcli.core.roles import canonical_role
from memcli.errors import UsageError

# The roles a turn is written with (memcli.core.roles): the PRD's words on every write path.
HUMAN, AGENT, TOOL = "human", "agent", "tool"


@dataclass(frozen=True)
class Turn:
    """One message of a conversation: who said it, what, when (ISO 8601 or None).

    A tool call or result is a turn too (`kind`), its name, arguments or output in `extra`
    (the event's content beside `text`). `scope`: the user, agent or app the source names,
    used where the command line gives none. `project`: the names `--project` matches, the
    first being the app the turn goes to. `event_id` and `session_id`: set by a format whose
    turns another path of memcli records too (the agent hooks), so both name them alike."""

    conversation_id: str
    message_id: str
    role: str  # human | agent | tool (a memory of mem0, a note of basic-memory: human)
    text: str
    ts: str | None
    title: str | None = None
    kind: str = "message"  # message | tool_call | tool_result
    extra: Mapping[str, Any] = field(default_factory=dict)
    scope: Mapping[str, str] = field(default_factory=dict)
    tags: tuple[str, ...] = ()
    project: tuple[str, ...] = ()
    event_id: str | None = None
    session_id: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "role", canonical_role(self.role))


class Notes(list[str]):
    """What the user should hear of (printed on stderr, and the report's `notes`), and what
    was left out, counted by reason (the report's `left_out`): no kind of turn is dropped
    without a count."""

    def __init__(self) -> None:
        super().__init__()
        self.left_out: Counter[str] = Counter()

    def skip(self, reason: str, n: int = 1) -> None:
        self.left_out[reason] += n

    def summary(self, fmt: str) -> str | None:
        """One line naming what was left out, most first (None: nothing was)."""
        if not self.left_out:
            return None
        parts = [f"{n} {reason}" for reason, n in sorted(self.left_out.items(),
                                                         key=lambda kv: (-kv[1], kv[0]))]
        return f"{fmt}: left out {sum(self.left_out.values())}: {', '.join(parts)}"


HINTS = {"chatgpt": "give the export's conversations.json",
         "claude": "give the export's conversations.json",
         "claude-code": "give ~/.claude/projects, a project folder in it or one .jsonl",
         "codex": "give ~/.codex/sessions, a folder in it or one rollout-*.jsonl",
         "mem0": "give the JSON of mem0's get_all or export",
         "basic-memory": "give a basic-memory project folder of .md notes"}


def bad(fmt: str, what: str) -> UsageError:
    """The one-line refusal of a file that is not of the format (exit 2)."""
    return UsageError(f"not a {fmt} export: {what}", HINTS.get(fmt, "see docs/guides/importing.md"))


def as_list(value: Any, fmt: str, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise bad(fmt, f"{what} is not a list")
    return value


def as_dict(value: Any, fmt: str, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise bad(fmt, f"{what} is not an object")
    return value


def ident(value: Any, fmt: str, what: str) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int) or value == "":
        raise bad(fmt, f"{what} has no id")
    return str(value)


def epoch_ts(value: Any, fmt: str, what: str) -> str | None:
    """Seconds since 1970 (a float, as ChatGPT writes them) as an ISO time; None kept."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise bad(fmt, f"{what} has a create_time that is not a number")
    try:
        return datetime.fromtimestamp(value, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    except (OverflowError, OSError, ValueError):
        raise bad(fmt, f"{what} has a create_time out of range") from None


def iso_ts(value: Any, fmt: str, what: str) -> str | None:
    """An ISO 8601 time (as Claude writes them), checked; None kept."""

    if value is None:
        return None
    if not isinstance(value, str):
        raise bad(fmt, f"{what} has a created_at that is not a string")
    try:
        return parse_ts(value)
    except ValueError as exc:
        raise bad(fmt, f"{what}: {exc}") from None


def agent_event_id(session: str, key: str) -> str:
    """The event id of an agent transcript's text turn, as the agent hooks name it (memcli
    hook record): importing a transcript a hook recorded adds nothing."""

    return "hook-" + hashlib.sha256(f"{session}\0{key}".encode()).hexdigest()[:24]


def loose_ts(value: Any) -> str | None:
    """An ISO 8601 time, or None when there is none or it is not one (a transcript line's
    time is a nicety: a line without one still says what was said)."""

    if not isinstance(value, str) or not value:
        return None
    try:
        return parse_ts(value)
    except ValueError:
        return None
