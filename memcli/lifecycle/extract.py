"""What consolidation reads from a session: with a model, structured JSON; without, chosen turns.

The model gets the session's turns numbered [1]..[n] and answers with one JSON object:
`summary`, `facts`, `preferences`, `decisions`, `todos`, `entities` and `profile` (changes to
sensitive profile fields, which only ever become consent proposals). Each item is validated on
its own against the writing policy (`textrules.check_memory_text`; the summary against
`check_summary_text`, past tense included): a bad item costs that item only. It is dropped and
listed in `dropped` with its reason, the rest is kept, and a dropped summary is replaced by the
extractive one. Only a reply that is no JSON object of this shape is refused whole (one repair
turn, then a failure).

Without a model, `extractive_summary` picks the most informative turns verbatim and labels the
result `"method": "extractive"`: nothing here pretends a model ran.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    Field,
    ValidationError,
    WithJsonSchema,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema

from memcli.derived.textrules import FactText, check_summary_text, clip
from memcli.entities.extraction import extract_entities

TURN_CHARS = 1500  # a turn longer than this is clipped in the prompt (tool output, pastes)
PROMPT_CHARS = 14000  # turns per prompt stop here even before episodes_per_prompt

# The model is asked for a string; None is what a summary breaking the rules becomes.
SummaryText = Annotated[
    Annotated[str, AfterValidator(check_summary_text)] | None,
    WithJsonSchema({"type": "string", "description": "1-5 sentences, past tense"}),
]


class Item(BaseModel):
    text: FactText
    importance: float = Field(default=0.5, ge=0, le=1)
    turns: list[int] = Field(default_factory=list, max_length=50)
    category: str | None = None


class ProfileChange(BaseModel):
    field: Literal["preferred_name", "pronouns", "city", "language"]
    value: str = Field(min_length=1, max_length=100)
    text: FactText
    turns: list[int] = Field(default_factory=list, max_length=50)


class Dropped(BaseModel):
    """An item of a reply that broke a rule: where it was, its text, and why it was dropped."""

    item: str  # "facts[1]", "summary"
    text: str
    reason: str


ENTITY_CHARS = 100


class Extraction(BaseModel):
    summary: SummaryText
    facts: list[Item] = Field(default_factory=list, max_length=40)
    preferences: list[Item] = Field(default_factory=list, max_length=20)
    decisions: list[Item] = Field(default_factory=list, max_length=20)
    todos: list[Item] = Field(default_factory=list, max_length=20)
    entities: list[Annotated[str, Field(max_length=ENTITY_CHARS)]] = Field(
        default_factory=list, max_length=50
    )
    profile: list[ProfileChange] = Field(default_factory=list, max_length=8)
    dropped: SkipJsonSchema[list[Dropped]] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _each_item_on_its_own(cls, data: Any) -> Any:
        """Drop the items that break a rule (and those over a list's length), each with its
        reason; what is left is validated as usual. Not a dict, not a list, no summary at
        all: the shape itself is wrong, and the whole reply is refused."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        dropped: list[dict[str, str]] = []
        for name, model, limit in _ITEM_LISTS:
            raw = data.get(name)
            if isinstance(raw, list):
                data[name] = keep_valid(name, raw, model, limit, dropped)
        entities = data.get("entities")
        if isinstance(entities, list):
            data["entities"] = keep_valid("entities", entities, _Entity, 50, dropped)
        summary = data.get("summary")
        if isinstance(summary, str):
            try:
                check_summary_text(summary)
            except ValueError as exc:
                dropped.append({"item": "summary", "text": clip(summary, 200), "reason": str(exc)})
                data["summary"] = None
        data["dropped"] = dropped
        return data


class _Entity(BaseModel):
    name: Annotated[str, Field(max_length=ENTITY_CHARS)]


_ITEM_LISTS: tuple[tuple[str, type[BaseModel], int], ...] = (
    ("facts", Item, 40),
    ("preferences", Item, 20),
    ("decisions", Item, 20),
    ("todos", Item, 20),
    ("profile", ProfileChange, 8),
)


def keep_valid(
    name: str, raw: list[Any], model: type[BaseModel], limit: int, dropped: list[dict[str, str]]
) -> list[Any]:
    """The items of `raw` that `model` validates, at most `limit`; the others go to
    `dropped` as {"item": "name[i]", "text", "reason"}."""
    kept: list[Any] = []
    for i, item in enumerate(raw):
        where = f"{name}[{i}]"
        text = item.get("text", "") if isinstance(item, dict) else item
        try:
            model.model_validate({"name": item} if model is _Entity else item)
        except ValidationError as exc:
            reason = "; ".join(e["msg"].removeprefix("Value error, ") for e in exc.errors())
            dropped.append({"item": where, "text": clip(str(text), 200), "reason": reason})
            continue
        if len(kept) >= limit:
            dropped.append(
                {"item": where, "text": clip(str(text), 200), "reason": f"more than {limit} {name}"}
            )
            continue
        kept.append(item)
    return kept


# list name -> (memory kind, default category)
KINDS = {
    "facts": ("fact", "knowledge"),
    "preferences": ("fact", "preferences"),
    "decisions": ("decision", "decisions"),
    "todos": ("task", "tasks"),
}

SYSTEM = (
    "You turn a conversation into long-term memory for an assistant. Extract what is worth "
    "remembering in later conversations:\n"
    "- facts: about the people (life, work, family, health, plans, events, possessions), "
    "with dates when the conversation gives them;\n"
    "- preferences: likes, dislikes, habits, wishes;\n"
    "- decisions: what someone decided;\n"
    "- todos: what someone committed to do;\n"
    "- entities: names of people, places, organisations, projects, things mentioned;\n"
    "- profile: only when a person states their own preferred name, pronouns, city or language "
    "(or a change of them): field, value, and a fact text.\n"
    "Every text: complete and self-contained, third person naming the person (never I, me, my, "
    "you, your, we, our), neutral, 1-2 sentences, at most 280 characters. Do not invent "
    "anything; skip small talk. `turns` lists the [n] numbers each item comes from. "
    "`importance` is 0-1 (1: core identity or commitments). `category` (facts only) is one "
    "of: {categories}. `summary`: 1-5 sentences, past tense, third person, on what was "
    "discussed, decided or done."
)


def system_prompt(categories: list[str]) -> str:
    return SYSTEM.format(categories=", ".join(categories))


def speaker(ep: dict[str, Any]) -> str:
    return ep.get("actor_id") or ep.get("actor_type") or "someone"


def chunk_episodes(episodes: list[dict[str, Any]], per_prompt: int) -> list[list[dict]]:
    """Consecutive windows of turns small enough for one prompt each."""
    chunks: list[list[dict]] = []
    current: list[dict] = []
    size = 0
    for ep in episodes:
        length = min(len(ep["content"]), TURN_CHARS) + 40
        if current and (len(current) >= per_prompt or size + length > PROMPT_CHARS):
            chunks.append(current)
            current, size = [], 0
        current.append(ep)
        size += length
    if current:
        chunks.append(current)
    return chunks


def user_prompt(session_id: str, chunk: list[dict[str, Any]], part: tuple[int, int]) -> str:
    first = chunk[0]["event_time"][:10]
    people = sorted({speaker(e) for e in chunk})
    head = f"Session {session_id}, {first}; participants: {', '.join(people)}"
    if part[1] > 1:
        head += f" (part {part[0]} of {part[1]})"
    lines = [head, ""]
    for n, ep in enumerate(chunk, start=1):
        when = ep["event_time"][:16].replace("T", " ")
        lines.append(f"[{n}] {speaker(ep)} ({when}): {clip(ep['content'], TURN_CHARS)}")
    return "\n".join(lines)


def cited(turns: list[int], chunk: list[dict[str, Any]]) -> list[int]:
    """Episode ids for the [n] turn numbers an item cites (the whole chunk when none are valid)."""
    ids = [chunk[n - 1]["id"] for n in turns if 1 <= n <= len(chunk)]
    return list(dict.fromkeys(ids)) or [ep["id"] for ep in chunk]


_TIME = re.compile(
    r"\b\d{1,4}\b|\b(?:today|tomorrow|yesterday|monday|tuesday|wednesday|thursday|"
    r"friday|saturday|sunday|january|february|march|april|may|june|july|august|"
    r"september|october|november|december)\b",
    re.IGNORECASE,
)


def extractive_summary(
    session_id: str, episodes: list[dict[str, Any]], *, max_turns: int = 5, max_chars: int = 1000
) -> tuple[str, dict[str, Any], list[int]]:
    """(text, structured, episode ids) from selected turns, chosen without any model.

    A turn scores for the entities it names, for times and numbers, and for length (longer turns
    carry more content than "ok, thanks"); the best few are kept in conversation order.
    """
    scored = []
    names: dict[str, None] = {}
    for i, ep in enumerate(episodes):
        ents = extract_entities(ep["content"])
        for ent in ents:
            names.setdefault(ent.value, None)
        score = (
            len(ents) + 0.5 * len(_TIME.findall(ep["content"])) + min(len(ep["content"]), 300) / 150
        )
        scored.append((score, i))
    keep = sorted(i for _, i in sorted(scored, key=lambda t: (-t[0], t[1]))[:max_turns])
    date = episodes[0]["event_time"][:10] if episodes else ""
    lines = [f"Session {session_id} ({date}), selected turns:"]
    used = len(lines[0])
    chosen: list[int] = []
    for i in keep:
        ep = episodes[i]
        line = f"- {speaker(ep)}: {clip(ep['content'], 200)}"
        if used + len(line) > max_chars and chosen:
            break
        lines.append(line)
        used += len(line) + 1
        chosen.append(ep["id"])
    structured = {
        "method": "extractive",
        "facts": [],
        "preferences": [],
        "decisions": [],
        "todos": [],
        "entities": list(names)[:50],
    }
    return "\n".join(lines), structured, chosen
