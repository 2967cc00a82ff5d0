"""A ChatGPT data export's conversations.json: a list of conversations (or one conversation,
as browser exporters save it), each a tree of messages (`mapping`) whose kept branch ends at
`current_node`. Edited or regenerated messages are siblings on other branches: only the kept
one is imported. A conversation without `current_node` (older exports, some shared ones)
keeps its newest leaf's branch, and a note says so.

On that branch, a message's `recipient` says whom it was for. To `all`: a chat turn. To a tool
(`python`, `canmore.create_textdoc`, `file_search.msearch`, `web.run`, ...): a `tool_call`
event, the tool's name and its input (a code cell's code, a canvas's JSON); an `author.role`
`tool` message is a `tool_result` (a code cell's output, a search's answer), tied to the call
before it. Reasoning (`thoughts`, `reasoning_recap`), system and hidden context messages and
empty turns are left out, each counted in the report by kind."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

from memcli.importers.turns import AGENT, HUMAN, TOOL, Notes, Turn, as_dict, bad, epoch_ts, ident

FMT = "chatgpt"
ITEM = "conversation"
TEXT_TYPES = ("text", "multimodal_text", None)
CODE_TYPES = ("code", "execution_output", "system_error", "tether_quote",
              "tether_browsing_display", "computer_output")
REASONING = ("thoughts", "reasoning_recap")


def item_turns(conv: Any, n: int, notes: Notes) -> Iterator[Turn]:
    conv = as_dict(conv, FMT, f"conversation {n}")
    conv_id = _conversation_id(conv, n)
    title = conv.get("title") if isinstance(conv.get("title"), str) else None
    mapping = as_dict(conv.get("mapping"), FMT, f"conversation {n}'s mapping")
    current = conv.get("current_node")
    if current is None and mapping:
        current = _newest_leaf(mapping)
        notes.append(f"conversation {n} ({title or conv_id}) names no current_node: "
                     "imported the branch of its newest message")
    calls: dict[str, str] = {}  # tool name -> the id of its latest call, for its result
    for node in _kept_branch(mapping, current, n):
        turn = _turn(node, conv_id, title, n, notes, calls)
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


def _turn(node: dict[str, Any], conv_id: str, title: str | None, n: int, notes: Notes,
          calls: dict[str, str]) -> Turn | None:
    message = node.get("message")
    if message is None:
        return None  # the tree's root: no message at all
    where = f"conversation {n}'s message"
    message = as_dict(message, FMT, where)
    author = as_dict(message.get("author") or {}, FMT, f"{where} author")
    role = author.get("role")
    given = message.get("metadata")
    metadata = given if isinstance(given, dict) else {}
    content = as_dict(message.get("content") or {}, FMT, f"{where} content")
    kind = content.get("content_type")
    given_to = message.get("recipient")
    recipient = given_to if isinstance(given_to, str) and given_to not in ("all", "") else None
    to_tool = recipient is not None
    hidden = metadata.get("is_visually_hidden_from_conversation") and not to_tool
    if role == "system" or (hidden and role != TOOL):
        return _skip(notes, "system or hidden")
    if kind in REASONING:
        return _skip(notes, "reasoning")
    if kind in ("user_editable_context", "model_editable_context"):
        return _skip(notes, "custom instructions or memory context")
    msg_id = ident(message.get("id") or node.get("id"), FMT, where)
    base: dict[str, Any] = {"conversation_id": conv_id, "message_id": msg_id, "title": title,
                            "ts": epoch_ts(message.get("create_time"), FMT, where)}
    text = _text(content, metadata)
    if role == "assistant" and recipient is not None:
        return _call(recipient, text, content, msg_id, base, notes, calls)
    if role == TOOL:
        return _result(author, text, content, base, notes, calls)
    if role not in ("user", "assistant"):
        return _skip(notes, f"{role or 'no'} author")
    if not text.strip():
        return _skip(notes, "empty")
    return Turn(role=HUMAN if role == "user" else AGENT, text=text, **base)


def _call(recipient: str, text: str, content: dict[str, Any], msg_id: str,
          base: dict[str, Any], notes: Notes, calls: dict[str, str]) -> Turn | None:
    """A message to a tool: its input as the call's arguments (JSON when it is JSON)."""
    if not text.strip():
        return _skip(notes, "empty tool call")
    try:
        args: Any = json.loads(text)
    except ValueError:
        args = text
    calls[recipient] = msg_id
    extra: dict[str, Any] = {"name": recipient, "args": args, "call_id": msg_id}
    if isinstance(content.get("language"), str):
        extra["language"] = content["language"]
    return Turn(role=AGENT, kind="tool_call", extra=extra,
                text=f"{recipient}({json.dumps(args, ensure_ascii=False)})", **base)


def _result(author: dict[str, Any], text: str, content: dict[str, Any], base: dict[str, Any],
            notes: Notes, calls: dict[str, str]) -> Turn | None:
    """A tool's message: its output, tied to the latest call of that tool."""
    name = author.get("name") if isinstance(author.get("name"), str) else None
    if not text.strip():
        return _skip(notes, "empty tool result")
    call_id = calls.get(name or "") or next(reversed(calls.values()), None)
    extra: dict[str, Any] = {"output": text, "tool": name, "call_id": call_id}
    if content.get("content_type") == "system_error":
        extra["is_error"] = True
    return Turn(role=TOOL, kind="tool_result", text=text, extra=extra, **base)


def _skip(notes: Notes, reason: str) -> Turn | None:
    """Nothing, counted under `reason` in the report's `left_out`."""
    notes.skip(reason)
    return None


def _text(content: dict[str, Any], metadata: dict[str, Any]) -> str:
    """The text parts, joined (a code cell: its code; an output: its text); other parts
    (images, files) are named when the export gives a name, else left out."""
    pieces: list[str] = []
    kind = content.get("content_type")
    if kind in TEXT_TYPES:
        for part in content.get("parts") or []:
            if isinstance(part, str):
                pieces.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                pieces.append(part["text"])
            elif isinstance(part, dict) and isinstance(part.get("name"), str):
                pieces.append(f"[attachment: {part['name']}]")
    elif kind in CODE_TYPES or isinstance(content.get("text"), str):
        for key in ("text", "result", "name"):
            if isinstance(content.get(key), str):
                pieces.append(content[key])
                break
    for item in metadata.get("attachments") or []:
        if isinstance(item, dict) and isinstance(item.get("name"), str):
            pieces.append(f"[attachment: {item['name']}]")
    return "\n".join(p for p in pieces if p.strip())
