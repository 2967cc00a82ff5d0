"""The yaml form of a view file (`memcli view export --format yaml`): a list of mappings.

    - id: m:12            # leave as it is; an item without `id` is a new one
      category: profile   # facts only
      text: Alice prefers green tea

Keys per kind: facts `category, text`; preferences `text`; decisions `decision, rationale,
constraints, alternatives, consequences`; tasks `status, title, details`; procedures `title,
steps`. Line numbers in errors are the line of the item's first key.
"""

from __future__ import annotations

from typing import Any

import yaml

from memcli.editable_views.format import (
    DECISION_LISTS,
    DEFAULT_CATEGORY,
    TASK_STATUSES,
    Item,
    bad,
    norm,
    norm_details,
    split_ref,
)

_KEYS = {
    "facts": ("category", "text"),
    "preferences": ("text",),
    "decisions": ("decision", *DECISION_LISTS),
    "tasks": ("status", "title", "details"),
    "procedures": ("title", "steps"),
}


# libyaml's C parser and emitter when PyYAML has them (5x faster on a large view).
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    pass


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None  # details keep their lines
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def render_yaml(kind: str, items: list[Item], header: str) -> str:
    rows = []
    for item in items:
        row: dict[str, Any] = {"id": item.ref}
        for key in _KEYS[kind]:
            value = item.value[key]
            if value in ([], "") or (value is None and key == "title"):
                continue  # an empty list, no details, no title: left out
            row[key] = value
        rows.append(row)
    comments = "".join(f"# {line}".rstrip() + "\n" for line in header.splitlines())
    body = yaml.dump(rows, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=10_000,
                     default_flow_style=False) if rows else "[]\n"
    return comments + body


def parse_yaml(kind: str, name: str, text: str) -> list[Item]:
    loader = _Loader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return []
        if not isinstance(root, yaml.SequenceNode):
            raise bad(f"{name}:{root.start_mark.line + 1}", "expected a list of items",
                      "each item starts with '- '")
        items = []
        for node in root.value:
            where = f"{name}:{node.start_mark.line + 1}"
            data = loader.construct_object(node, deep=True)
            items.append(_item(kind, where, node.start_mark.line + 1, data))
        return items
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line = mark.line + 1 if mark is not None else 1
        problem = getattr(exc, "problem", None) or "not valid yaml"
        raise bad(f"{name}:{line}", f"cannot read the yaml: {problem}") from None
    finally:
        loader.dispose()


def _item(kind: str, where: str, line: int, data: Any) -> Item:
    if not isinstance(data, dict):
        raise bad(where, "an item is a mapping", f"keys: id, {', '.join(_KEYS[kind])}")
    unknown = sorted(str(k) for k in data if k not in ("id", *_KEYS[kind]))
    if unknown:
        raise bad(where, f"unknown key {unknown[0]!r}", f"keys: id, {', '.join(_KEYS[kind])}")
    ref = data.get("id")
    if ref is not None and not isinstance(ref, str):
        raise bad(where, f"malformed id {ref!r}", "keep each id exactly as exported")
    value: dict[str, Any]
    if kind in ("facts", "preferences"):
        value = {"text": norm(_text(data, "text", where, required=True))}
        if kind == "facts":
            category = data.get("category", DEFAULT_CATEGORY)
            if category is not None and not isinstance(category, str):
                raise bad(where, "category must be text")
            value = {"category": category, **value}
    elif kind == "decisions":
        value = {"decision": norm(_text(data, "decision", where, required=True))}
        value.update({key: _list(data, key, where) for key in DECISION_LISTS})
    elif kind == "tasks":
        status = data.get("status", "open")
        if status not in TASK_STATUSES:
            raise bad(where, f"unknown task status {status!r}", "open, doing or done")
        value = {"status": status, "title": norm(_text(data, "title", where, required=True)),
                 "details": norm_details(_text(data, "details", where))}
    else:
        title = norm(_text(data, "title", where)) or None
        steps = _list(data, "steps", where)
        if not steps:
            raise bad(where, "a procedure without steps", "give `steps:` as a list")
        value = {"title": title, "steps": steps}
    return Item(kind, split_ref(ref, where) if ref is not None else None, value, line)


def _text(data: dict[str, Any], key: str, where: str, required: bool = False) -> str:
    value = data.get(key)
    if value is None:
        if required:
            raise bad(where, f"no {key!r}", "delete the item to forget it")
        return ""
    if not isinstance(value, str):
        raise bad(where, f"{key!r} must be text", "quote it: 'yes', '12'")
    if required and not norm(value):
        raise bad(where, f"an empty {key!r}", "delete the item to forget it")
    return value


def _list(data: dict[str, Any], key: str, where: str) -> list[str]:
    value = data.get(key) or []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise bad(where, f"{key!r} must be a list of texts")
    return [norm(v) for v in value if norm(v)]
