"""What a format module yields, and the checks the formats share."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from memcli.errors import UsageError


@dataclass(frozen=True)
class Turn:
    """One message of a conversation: who said it, what, when (ISO 8601 or None)."""

    conversation_id: str
    message_id: str
    role: str  # user | assistant
    text: str
    ts: str | None
    title: str | None = None


def bad(fmt: str, what: str) -> UsageError:
    """The one-line refusal of a file that is not of the format (exit 2)."""
    return UsageError(f"not a {fmt} export: {what}", "give the export's conversations.json")


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
    from memcli.core.records import parse_ts

    if value is None:
        return None
    if not isinstance(value, str):
        raise bad(fmt, f"{what} has a created_at that is not a string")
    try:
        return parse_ts(value)
    except ValueError as exc:
        raise bad(fmt, f"{what}: {exc}") from None
