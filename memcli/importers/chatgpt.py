"""A ChatGPT data export's conversations.json: a list of conversations, each a tree of
messages (`mapping`) whose kept branch ends at `current_node`. Edited or regenerated
messages are siblings on other branches: only the kept one is imported. A conversation
without `current_node` (older exports, some shared ones) keeps its newest leaf's branch, and
a note says so."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

from memcli.importers.turns import Turn, as_dict, as_list, bad, epoch_ts, ident

FMT = "chatgpt"
ROLES = {"user": "user", "assistant": "assistant"}  # system and tool turns are left out


def turns(data: Any, notes: list[str]) -> Iterator[Turn]:
    for n, conv in enumerate(as_list(data, FMT, "the file"), 1):
        conv = as_dict(conv, FMT, f"conversation {n}")
        conv_id = _conversation_id(conv, n)
        title = conv.get("title") if isinstance(conv.get("title"), str) else None
        mapping = as_dict(conv.get("mapping"), FMT, f"conversation {n}'s mapping")
        current = conv.get("current_node")
        if current is None and mapping:
            current = _newest_leaf(mapping)
            notes.append(f"conversation {n} ({title or conv_id}) names no current_node: "
                         "imported the branch of its newest message")
        for node in _kept_branch(mapping, current, n):
            turn = _turn(node, conv_id, title, n)
            if turn is not None:
                yield turn


def _conversation_id(conv: dict[str, Any], n: int) -> str:
    """The export's id; a file without one: a digest of the title and start time, stable
    across imports of the same file."""
    given = conv.get("conversation_id") or conv.get("id")
    if given is not None:
        return ident(given, FMT, f"conversation {n}")
    key = json.dumps([conv.get("title"), conv.get("create_time")], ensure_ascii=False)
    return "t" + hashlib.sha256(key.encode()).hexdigest()[:24]


def _newest_leaf(mapping: dict[str, Any]) -> str | None:
    """The node no other node names as its parent, with the latest message (ties: the last
    in the file)."""
    parents = {node.get("parent") for node in mapping.values() if isinstance(node, dict)}
    best, best_time = None, float("-inf")
    for node_id, node in mapping.items():
        if node_id in parents or not isinstance(node, dict):
            continue
        message = node.get("message")
        when = message.get("create_time") if isinstance(message, dict) else None
        when = when if isinstance(when, int | float) and not isinstance(when, bool) else 0.0
        if when >= best_time:
            best, best_time = node_id, when
    return best


def _kept_branch(mapping: dict[str, Any], current: Any, n: int) -> list[dict[str, Any]]:
    """The nodes from the root to `current_node`, following `parent` up (cycles refused)."""
    if current is None:
        return []
    branch: list[dict[str, Any]] = []
    seen: set[str] = set()
    node_id = current
    while node_id is not None:
        if not isinstance(node_id, str) or node_id not in mapping:
            raise bad(FMT, f"conversation {n} names a node {node_id!r} its mapping lacks")
        if node_id in seen:
            raise bad(FMT, f"conversation {n}'s mapping has a cycle")
        seen.add(node_id)
        node = as_dict(mapping[node_id], FMT, f"conversation {n}'s node {node_id}")
        branch.append(node)
        node_id = node.get("parent")
    return branch[::-1]


def _turn(node: dict[str, Any], conv_id: str, title: str | None, n: int) -> Turn | None:
    message = node.get("message")
    if message is None:
        return None
    where = f"conversation {n}'s message"
    message = as_dict(message, FMT, where)
    role = as_dict(message.get("author") or {}, FMT, f"{where} author").get("role")
    given = message.get("metadata")
    metadata = given if isinstance(given, dict) else {}
    if role not in ROLES or metadata.get("is_visually_hidden_from_conversation"):
        return None
    text = _text(as_dict(message.get("content") or {}, FMT, f"{where} content"), metadata)
    if not text.strip():
        return None
    msg_id = ident(message.get("id") or node.get("id"), FMT, where)
    return Turn(conv_id, msg_id, ROLES[role], text, epoch_ts(message.get("create_time"), FMT,
                                                             where), title)


def _text(content: dict[str, Any], metadata: dict[str, Any]) -> str:
    """The text parts, joined; other parts (images, files) are named when the export gives a
    name, else left out."""
    pieces: list[str] = []
    if content.get("content_type") in ("text", "multimodal_text", None):
        for part in content.get("parts") or []:
            if isinstance(part, str):
                pieces.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                pieces.append(part["text"])
            elif isinstance(part, dict) and isinstance(part.get("name"), str):
                pieces.append(f"[attachment: {part['name']}]")
    for item in metadata.get("attachments") or []:
        if isinstance(item, dict) and isinstance(item.get("name"), str):
            pieces.append(f"[attachment: {item['name']}]")
    return "\n".join(p for p in pieces if p.strip())
