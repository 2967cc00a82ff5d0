"""The bundle page's reading of an `acb build` result: what the agent will see, and why.

The bundle itself is the one `memcli acb build --json` prints for the same request (built by
memcli.service.api.build_acb, never rebuilt here); this module only adds what a person reads
off it at a glance: each section's share of its cap, each item's references split into links
(a memory, an event, a decision), and the omissions beside the section they were cut from.
"""

from __future__ import annotations

from typing import Any

# The form's fields, read from the query string as the CLI's flags read them.
FORM_FIELDS = ("tenant", "user", "session", "query", "channel", "agent", "app", "max_tokens")
CHANNELS = ("private", "team", "public", "agent")


def acb_request(form: dict[str, str]) -> dict[str, Any] | None:
    """The acb request for the form's values (None: nothing asked yet). The page never moves
    the delta header's base (`track` off): looking at a bundle must not change the next one
    the agent gets."""
    given = {k: v.strip() for k, v in form.items() if k in FORM_FIELDS and v and v.strip()}
    if not any(k in given for k in ("user", "session", "query")):
        return None
    request: dict[str, Any] = {"track": False}
    for key, name in (("tenant", "tenant_id"), ("user", "user_id"), ("session", "session_id"),
                      ("query", "query_text"), ("channel", "channel"), ("agent", "agent_id"),
                      ("app", "app_id")):
        if key in given:
            request[name] = given[key]
    if "max_tokens" in given:
        request["max_tokens"] = given["max_tokens"]  # the model checks it (a number, >= 1)
    return request


def ref_link(ref: str) -> dict[str, str | None]:
    """A reference as the page shows it: `mem:12` links to the memory's page, the others
    (`event:ID`, `decision:3`, `view:rules`) are named."""
    kind, _, value = ref.partition(":")
    href = f"memories/{value}" if kind == "mem" and value.isdigit() else None
    return {"ref": ref, "href": href}


def bundle_view(bundle: dict[str, Any]) -> dict[str, Any]:
    """`bundle` with, per section, its share of its cap and its omissions, and per item its
    references as links; the totals and the delta header as they are."""
    omitted: dict[str, list[dict[str, Any]]] = {}
    for row in bundle.get("omissions") or []:
        omitted.setdefault(row.get("section", ""), []).append(row)
    sections = []
    for section in bundle.get("sections") or []:
        cap = section.get("cap") or 0
        tokens = section.get("tokens") or 0
        items = [{**item, "links": [ref_link(r) for r in item.get("refs") or []]}
                 for item in section.get("items") or []]
        sections.append({**section, "items": items, "omissions": omitted.pop(section["name"], []),
                         "share": round(100 * tokens / cap, 1) if cap else None,
                         "over": bool(cap) and tokens > cap})
    leftover = [row for rows in omitted.values() for row in rows]  # a section not in the bundle
    provenance = bundle.get("provenance") or {}
    return {"acb_id": bundle.get("acb_id"), "budget": bundle.get("budget_tokens"),
            "reserve": bundle.get("reserve_tokens"), "used": bundle.get("token_used"),
            "encoding": bundle.get("encoding"), "delta": bundle.get("delta"),
            "revision": bundle.get("revision") or {}, "sections": sections,
            "omissions": bundle.get("omissions") or [], "other_omissions": leftover,
            "retrieval_path": provenance.get("retrieval_path"),
            "legs": provenance.get("legs") or {},
            "query_truncated": provenance.get("query_truncated")}
