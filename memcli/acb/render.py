"""Rendering a context bundle as a prompt block, and the text of its parts.

The block is a sequence of parts (title, delta header, section headings, items), each ending in
one newline and none starting with whitespace. tiktoken's pre-tokenizer (cl100k and o200k alike)
then never joins text across two parts, so the block's token count is exactly the sum of the
parts' counts: the packer counts each part once and never re-encodes the whole
(tests/retrieval/test_acb.py checks the equality over random text). No blank lines between
sections for the same reason: two newlines from two parts would merge into one token.
"""

from __future__ import annotations

from typing import Any

TITLE = "# Context bundle "
ID_TOKENS_MAX = 16  # "acb_" + 16 hex digits never takes more than 16 extra tokens
SHORT_CHARS = 160  # one-line excerpts: delta bullets, related bullets
# Items printed as-is (files, free text, the app block's numbered lines); the rest are bullets.
BLOCK_TYPES = frozenset({"view", "text", "checkpoint", "app_memory"})
DELTA_SYMBOLS = {
    "created": "+created",
    "updated": "↑updated",
    "merged": "↔merged",
    "deleted": "-deleted",
    "soft_deleted": "-deleted",
    "restored": "↺restored",
}


def short(text: str, limit: int = SHORT_CHARS) -> str:
    """One line of at most `limit` characters (whitespace collapsed, ellipsis when cut)."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def item_line(item: dict[str, Any]) -> str:
    """The exact text an item adds to the prompt block (its tokens are counted on this)."""
    text = item["text"].rstrip("\n")
    if item["type"] in BLOCK_TYPES:
        return text + "\n"
    return "- " + text.replace("\n", "\n  ") + "\n"


def title(acb_id: str) -> str:
    return f"{TITLE}{acb_id}\n"


def section_heading(name: str, app_id: str | None = None) -> str:
    if name == "app_memories":
        # The app-memory design's fixed block: the model is told whose memories these are.
        return (
            f"## app_memories\n(memories for app: {app_id})\nThe following are memories "
            f"from previous conversations with this app:\n"
        )
    return f"## {name}\n"


def delta_block(delta: dict[str, Any]) -> str:
    lines = [f"Memory updates since rev {delta['since_primary']}:\n"]
    lines.extend(f"- {b}\n" for b in delta["bullets"])
    return "".join(lines)


def delta_bullet(row: dict[str, Any]) -> str:
    """`+created: [decisions] Decision: use SQLite (#12)`; deleted memories show no text."""
    symbol = DELTA_SYMBOLS.get(row["op"], f"↑{row['op']}")
    label = f"[{row['category'] or row['kind']}] "
    if symbol == "-deleted" or row["state"] == "soft_deleted":
        return f"{symbol}: {label}#{row['memory_id']}"
    return f"{symbol}: {label}{short(row['content'], 100)} (#{row['memory_id']})"


def delta_rest(counts: dict[str, int]) -> str:
    parts = [
        f"{n} {DELTA_SYMBOLS.get(op, op).lstrip('+-↑↔↺')}"
        for op, n in sorted(counts.items())
        if n > 0
    ]
    return f"… and {sum(counts.values())} more ({', '.join(parts)})"


def render_markdown(bundle: dict[str, Any]) -> str:
    """The bundle as one prompt block: title, delta header, then each non-empty section.

    A budget too small for even the title renders nothing (token_used 0)."""
    return "" if bundle.get("token_used") == 0 else render_block(bundle)


def render_block(bundle: dict[str, Any]) -> str:
    parts = [title(bundle["acb_id"])]
    if bundle.get("delta") and bundle["delta"]["bullets"]:
        parts.append(delta_block(bundle["delta"]))
    app_id = bundle.get("provenance", {}).get("filters", {}).get("app_id")
    for section in bundle["sections"]:
        if section["items"]:
            parts.append(section_heading(section["name"], app_id))
            parts.extend(item_line(item) for item in section["items"])
    return "".join(parts)


# -- item texts ------------------------------------------------------------------------------
def evidence_text(row: dict[str, Any], related: list[dict[str, Any]]) -> str:
    who = row.get("actor_id") or row.get("actor_type") or ""
    speaker = f" {who}:" if row["kind"] == "episode" and who else ""
    # A summary says so: it is derived, and may have drifted from the turns it cites.
    label = "summary" if row["kind"] == "summary" else row["category"] or row["kind"]
    head = f"#{row['id']} [{label}] {row['event_time'][:10]}{speaker}"
    lines = [f"{head} {row['content'].strip()}"]
    lines.extend(
        f"↳ related #{r['id']} ({r['strength']:.2f}): {short(r['content'])}" for r in related
    )
    return "\n".join(lines)


def profile_text(row: dict[str, Any]) -> str:
    return f"[{row['category']}] {row['content'].strip()}"


def reflection_text(row: dict[str, Any]) -> str:
    return f"Reflection of {row['event_time'][:10]} (#{row['id']}): {row['content'].strip()}"


def turn_text(row: dict[str, Any]) -> str:
    who = row.get("actor_id") or row.get("actor_type") or "?"
    return f"[{row['event_time'][:16]}] {who}: {row['content'].strip()}"


def decision_item_text(row: dict[str, Any]) -> str:
    lines = [f"D{row['id']} ({row['scope']}) {row['decision']}"]
    for key, label in (
        ("rationale", "Rationale"),
        ("constraints", "Constraints"),
        ("alternatives", "Alternatives"),
        ("consequences", "Consequences"),
        ("refs", "Evidence"),
    ):
        if row.get(key):
            lines.append(f"{label}: " + "; ".join(str(v) for v in row[key]))
    if row.get("supersedes"):
        lines.append(f"(supersedes D{row['supersedes']})")
    return "\n".join(lines)


def task_item_text(row: dict[str, Any]) -> str:
    text = f"T{row['id']} [{row['status']}] {row['title']}"
    return f"{text}\n{row['details']}" if row.get("details") else text


def app_memory_text(position: int, row: dict[str, Any]) -> str:
    return f"{position}. [Created: {row['created_at'][:10]}] {short(row['content'], 400)}"
