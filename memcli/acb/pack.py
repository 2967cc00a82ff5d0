"""Packing a context bundle: sections by priority, items by token count, under the budget.

The token count of an item is tiktoken's count of exactly the line `memcli.acb.render` prints for
it, and the rendered block's count is the sum of its parts' (see render). Only a bundle that
comes within NEAR_LIMIT tokens of its budget is encoded whole once more, as a guard: any excess
(none has been seen) is trimmed from the lowest-priority section.

One exception to the priorities: the session's last turn (the floor) is packed before every
section, so a small budget spends itself on evidence only after the turn being answered.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from memcli.acb import duplicates, render
from memcli.core.tokens import count_tokens, get_encoding, truncate_to_tokens

# Render order (fill order is by priority); recent turns last, next to the model's next turn.
ORDER = (
    "identity",
    "rules",
    "profile",
    "reflection",
    "app_memories",
    "task_state",
    "decision_ledger",
    "handoff_packet",
    "retrieved_evidence",
    "recent_window",
)
# Files, free text and the reflection (prose, which the SQLite memory extension design wants in
# every call) can be cut.
TRUNCATABLE = frozenset({"view", "text", "checkpoint", "reflection"})
MIN_TRUNCATED = 8  # fewer tokens than this of a cut file is noise, not context
NEAR_LIMIT = 64


def pack(
    plan: list[dict[str, Any]],
    candidates: dict[str, list[dict[str, Any]]],
    delta: dict[str, Any] | None,
    *,
    max_tokens: int,
    reserve: int,
    enc: str,
    app_id: str | None,
) -> dict[str, Any]:
    """Fill the sections in `plan` order (by priority) from their candidates, best first."""
    available = max_tokens - reserve
    everything = [i for p in plan for i in candidates.get(p["name"], [])]
    # One encode per item, in this thread: tiktoken's batch call starts a thread pool per call,
    # which costs more than it saves on a few hundred short lines (measured: bench/acb.py).
    encode = get_encoding(enc).encode_ordinary
    for item in everything:
        item["tokens"] = len(encode(render.item_line(item)))
    omissions: dict[tuple[str, str], dict[str, Any]] = {}

    def omit(section: str, reason: str, item: dict[str, Any]) -> None:
        entry = omissions.setdefault(
            (section, reason),
            {"section": section, "reason": reason, "count": 0, "tokens": 0, "refs": []},
        )
        entry["count"] += 1
        entry["tokens"] += item["tokens"]
        if len(entry["refs"]) < 20:
            entry["refs"].append(omitted_ref(item))

    used = count_tokens(f"{render.TITLE}acb_\n", enc) + render.ID_TOKENS_MAX
    empty = used > available
    packed_ids: set[int] = set()
    # The floor: the session's last turn, the one the next model call answers, is packed
    # before anything else, whatever the priorities; only its section's cap or the budget
    # itself can leave it out (an omission then says which).
    floor, floor_done = None, False
    recent_plan = next((p for p in plan if p["name"] == "recent_window"), None)
    last = (candidates.get("recent_window") or [None])[0]
    if recent_plan is not None and last is not None and not empty:
        floor_done = True
        cost = count_tokens(render.section_heading("recent_window", app_id), enc) + last["tokens"]
        if cost <= min(recent_plan["cap"], available - used):
            floor = {"item": last, "tokens": cost}
            used += cost
            packed_ids.add(last["memory_id"])
        else:
            omit("recent_window",
                 "section_cap" if recent_plan["cap"] < available - used else "budget", last)
    if delta is not None and not empty:
        cost = count_tokens(render.delta_block(delta), enc)
        if used + cost <= available:
            used += cost
            delta["tokens"] = cost
        else:
            delta = None
    # Turns the recent window would hold at its own cap are not repeated as evidence.
    recent_cap = next((p["cap"] for p in plan if p["name"] == "recent_window"), 0)
    reserved, acc = set(), 0
    for item in candidates.get("recent_window", []):
        acc += item["tokens"]
        if acc > recent_cap:
            break
        reserved.add(item["memory_id"])
    deduped = 0
    collapser = duplicates.Collapser()  # evidence taken so far, by (near-)duplicate text
    sections: dict[str, dict[str, Any]] = {}
    for p in plan:
        name = p["name"]
        heading = count_tokens(render.section_heading(name, app_id), enc)
        taken: list[dict[str, Any]] = []
        sec_used = 0
        if name == "recent_window" and floor is not None:
            taken.append(floor["item"])
            sec_used = floor["tokens"]
        for item in candidates.get(name, []):
            if floor_done and item is last:
                continue  # the floor: packed, or omitted, above
            mid = item.get("memory_id")
            content = item.pop("_dup", None)  # evidence: its text, to collapse repeats
            owner = item.pop("_decision", None)  # evidence of a ledger decision
            if mid is not None and (
                mid in packed_ids or (name == "retrieved_evidence" and mid in reserved)
            ):
                deduped += 1
                continue
            if owner is not None and owner.get("memory_id") in packed_ids and not empty:
                duplicates.absorb(owner, item)  # one decision, once: its ledger row cites the turn
                deduped += 1
                if mid is not None:
                    packed_ids.add(mid)
                continue
            full_tokens = item["tokens"]
            start = 0 if taken else heading
            cap_left = p["cap"] - sec_used - start
            total_left = available - used - start
            room = min(cap_left, total_left)
            sig = None
            if content is not None and not empty and item["tokens"] <= room:
                sig = duplicates.signature(content)
                kept = collapser.find(sig)
                if kept is not None:  # the same sentence again: one item citing every ref
                    duplicates.absorb(kept, item)
                    deduped += 1
                    if mid is not None:
                        packed_ids.add(mid)
                    continue
            if empty:
                omit(name, "budget", item)
            elif item["tokens"] <= room:
                taken.append(item)
            elif (
                item["type"] in TRUNCATABLE
                and room >= MIN_TRUNCATED
                and truncate_item(item, room, enc)
            ):
                taken.append(item)
                omit(name, "truncated", {**item, "tokens": full_tokens - item["tokens"]})
            else:
                omit(name, "section_cap" if cap_left <= total_left else "budget", item)
                continue
            if taken and taken[-1] is item:
                sec_used += start + item["tokens"]
                used += start + item["tokens"]
                if mid is not None:
                    packed_ids.add(mid)
                if sig is not None:
                    collapser.add(sig, item)
        if name == "recent_window":
            taken.reverse()  # packed newest first, shown oldest first
        sections[name] = {
            "name": name,
            "priority": p["priority"],
            "cap": p["cap"],
            "tokens": sec_used,
            "items": taken,
        }
    # One entry per (section, artifact): a long tool output is many chunks of one artifact.
    tool: dict[tuple[str, str], dict[str, Any]] = {}
    for s in sections.values():
        for i in s["items"]:
            if i.get("artifact_id"):
                entry = tool.setdefault(
                    (s["name"], i["artifact_id"]),
                    {
                        "section": s["name"],
                        "reason": "truncated_tool_output",
                        "count": 0,
                        "refs": [],
                        "artifact_id": i["artifact_id"],
                        "hint": f"memcli artifact {i['artifact_id']}",
                    },
                )
                entry["count"] += 1
                entry["refs"].extend(r for r in i["refs"][1:2] if r not in entry["refs"])
    tool_omissions = list(tool.values())
    return {
        "acb_id": None,
        "budget_tokens": max_tokens,
        "reserve_tokens": reserve,
        "token_used": 0,
        "encoding": enc,
        "empty": empty,
        "delta": delta,
        "sections": [
            sections[n]
            for n in [n for n in ORDER if n in sections]
            + sorted(n for n in sections if n not in ORDER)
        ],
        "omissions": sorted(omissions.values(), key=lambda o: (o["section"], o["reason"]))
        + tool_omissions,
        "_deduped": deduped,
    }


def omitted_ref(item: dict[str, Any]) -> str:
    """What an omission names an item by: its first ref, or for a derived item (a summary,
    whose refs are its sources) its own memory."""
    return f"mem:{item['memory_id']}" if item.get("derived") else item["refs"][0]


def truncate_item(item: dict[str, Any], room: int, enc: str) -> bool:
    """Cut a block item (a file, free text) so that its rendered line fits `room` tokens;
    False when no non-empty prefix fits (an empty line would break the sum-of-parts count)."""
    target = room - 1  # the newline the renderer adds
    while target > 0:
        text = truncate_to_tokens(item["text"], target, enc).rstrip()
        n = count_tokens(render.item_line({**item, "text": text}), enc)
        if n <= room and text:
            item.update(text=text, tokens=n, truncated=True)
            return True
        if not text:
            return False
        target -= max(1, n - room)
    return False


def finish(
    bundle: dict[str, Any], plan: list[dict[str, Any]], enc: str, request: dict[str, Any]
) -> None:
    """Give the bundle its id and its token count (title, delta and sections, exactly)."""
    max_tokens = bundle["budget_tokens"]
    by_name = {s["name"]: s for s in bundle["sections"]}
    fill_order = [p["name"] for p in plan]
    while True:
        bundle["acb_id"] = bundle_id(request, bundle)
        if bundle["empty"]:
            bundle["token_used"] = 0
            break
        used = count_tokens(render.title(bundle["acb_id"]), enc)
        used += (bundle["delta"] or {}).get("tokens", 0)
        used += sum(s["tokens"] for s in bundle["sections"])
        if used > max_tokens - NEAR_LIMIT:
            used = max(used, count_tokens(render.render_block(bundle), enc))
        bundle["token_used"] = used
        if used <= max_tokens:
            break
        # The lowest-priority section with items gives one up; the last turn (the floor, the
        # recent window's last item) goes only when nothing else is left.
        victim = next(
            (by_name[n] for n in reversed(fill_order)
             if len(by_name[n]["items"]) > (n == "recent_window")),
            None,
        ) or next(by_name[n] for n in reversed(fill_order) if by_name[n]["items"])
        dropped = victim["items"].pop(0 if victim["name"] == "recent_window" else -1)
        victim["tokens"] -= dropped["tokens"]
        if not victim["items"]:
            victim["tokens"] = 0  # its heading goes too
        group = next(
            (
                o
                for o in bundle["omissions"]
                if o["section"] == victim["name"] and o["reason"] == "budget"
            ),
            None,
        )
        if group is None:
            group = {"section": victim["name"], "reason": "budget", "count": 0, "tokens": 0,
                     "refs": []}
            bundle["omissions"].append(group)
        group["count"] += 1
        group["tokens"] += dropped["tokens"]
        if len(group["refs"]) < 20:
            group["refs"].append(omitted_ref(dropped))
    bundle.pop("empty")


def bundle_id(request: dict[str, Any], bundle: dict[str, Any]) -> str:
    """A hash of the request, the thread revisions and the body: same inputs, same id.

    Item texts are fed to the hash one by one (a JSON dump of hundreds of item dicts cost
    ~3 ms a build); everything else goes in as sorted JSON."""
    digest = hashlib.sha256()
    head = {k: bundle.get(k) for k in ("budget_tokens", "delta", "omissions", "provenance")}
    head.update(request=request, revision=bundle.get("revision"))
    digest.update(json.dumps(head, sort_keys=True, ensure_ascii=False, default=str).encode())
    for section in bundle["sections"]:
        digest.update(f"\0{section['name']}\0{section['cap']}\0".encode())
        for item in section["items"]:
            # repr of the other fields: built in a fixed key order, so as stable as sorted JSON
            digest.update(item["text"].encode("utf-8", "surrogatepass"))
            digest.update(repr([(k, v) for k, v in item.items() if k != "text"]).encode())
    return "acb_" + digest.hexdigest()[:16]
