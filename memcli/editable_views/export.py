"""`memcli view export DIR`: one owner's items as files a person edits, and the manifest.

The folder holds `facts`, `preferences`, `decisions`, `tasks` and `procedures` (`.md`, or `.yaml`
with `--file-format yaml`), `identity.md` and `rules.md` (the texts bundles start with, verbatim:
`memcli.acb.sections.load_view`), and `view.json`, the manifest: the scope, the format, and for
each exported item its line and a digest of its value. `view apply` diffs the files against that
manifest (what the person changed) and the database against it (what changed meanwhile), so a
memory written after the export is never taken for a deleted line.

Output is deterministic: items sorted by category and id, no timestamps, so exporting twice
gives identical bytes and a person's edit is a clean diff.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memcli.acb.sections import load_view
from memcli.core import private
from memcli.editable_views.format import (
    DECISION_LISTS,
    KINDS,
    TEXT_VIEWS,
    TITLES,
    Item,
    digest,
    norm,
    norm_details,
    parse_markdown,
    procedure_value,
    render_markdown,
)
from memcli.editable_views.yamlview import parse_yaml, render_yaml
from memcli.errors import UsageError
from memcli.store import views_sql

if TYPE_CHECKING:
    from memcli.store.handle import MemoryHandle

MANIFEST = "view.json"
VERSION = 1
FORMATS = {"md": "md", "yaml": "yaml"}


@dataclass(frozen=True)
class Scope:
    """Whose view: one tenant, one user (None: the items with no user), one app (None: the
    items of no app); `high` items only when asked for."""

    tenant_id: str
    user_id: str | None = None
    app_id: str | None = None
    include_high: bool = False

    def sensitivities(self) -> tuple[str, ...]:
        return ("none", "low", "high") if self.include_high else ("none", "low")

    def describe(self) -> str:
        user = f"user {self.user_id}" if self.user_id else "no user"
        app = f"app {self.app_id}" if self.app_id else "no app"
        return f"{user}, tenant {self.tenant_id}, {app}"

    def as_json(self) -> dict[str, Any]:
        return {"tenant": self.tenant_id, "user": self.user_id, "app": self.app_id,
                "include_high": self.include_high}


def file_name(kind: str, fmt: str) -> str:
    return f"{kind}.{fmt}"


# -- reading the database --------------------------------------------------------------------
def collect(memory: MemoryHandle, scope: Scope) -> dict[str, list[Item]]:
    """The scope's current items, by kind, in file order."""
    db = memory.db
    owner: dict[str, Any] = {"tenant_id": scope.tenant_id, "user_id": scope.user_id,
                             "app_id": scope.app_id, "sensitivities": scope.sensitivities()}
    out: dict[str, list[Item]] = {}
    facts = views_sql.view_memories(db, kind="fact", not_category="preferences", **owner)
    out["facts"] = [_memory_item("facts", r, {"category": r["category"],
                                              "text": norm(r["content"])}) for r in facts]
    prefs = views_sql.view_memories(db, kind="fact", category="preferences", **owner)
    out["preferences"] = [_memory_item("preferences", r, {"text": norm(r["content"])})
                          for r in prefs]
    out["decisions"] = [
        Item("decisions", f"d:{d['id']}",
             {"decision": norm(d["decision"]),
              **{k: [norm(e) for e in d[k] if norm(e)] for k in DECISION_LISTS}},
             extra={"id": d["id"], "memory_id": d["memory_id"], "refs": d["refs"]})
        for d in views_sql.view_decisions(db, **owner)
    ]
    out["tasks"] = [
        Item("tasks", f"t:{t['id']}",
             {"status": t["status"], "title": norm(t["title"]),
              "details": norm_details(t["details"])},
             extra={"id": t["id"], "memory_id": t["memory_id"]})
        for t in views_sql.view_tasks(db, **owner)
    ]
    procedures = views_sql.view_memories(db, kind="procedural", **owner)
    out["procedures"] = [
        _memory_item("procedures", r, procedure_value(r["content"], json.loads(r["attributes"])))
        for r in procedures
    ]
    return out


def _memory_item(kind: str, row: dict[str, Any], value: dict[str, Any]) -> Item:
    return Item(kind, f"m:{row['id']}", value, extra={"id": row["id"], "memory_id": row["id"]})


def load_texts(context_dir: Path | None) -> dict[str, str]:
    """identity and rules as bundles use them: the user's copy, else the bundled default."""
    return {name: load_view(name, context_dir)[0] for name in TEXT_VIEWS}


# -- the files -------------------------------------------------------------------------------
def header(kind: str, scope: Scope, fmt: str) -> str:
    """The comment at the top of a file: whose items, and how to edit them."""
    line, mark = ("item", "`id:`") if fmt == "yaml" else ("line", "marker")
    lines = [
        f"memcli view: {TITLES[kind].lower()} of {scope.describe()}.",
        f"Change a {line} to correct it (the old one is kept, superseded, in history);",
        f"delete a {line} to forget it (soft delete: `memcli restore ID` for 30 days);",
        f"add a {line} without {mark} to remember a new one.",
        f"Leave each {mark} (m:N, d:N, t:N) as it is: it says which item the {line} is.",
    ]
    lines += {
        "facts": ["A new fact takes the category of the '## heading' above it (yaml:",
                  "`category:`); to move a fact, delete it and add it again under the other."],
        "tasks": ["[ ] open, [/] doing, [x] done (yaml: `status:`); indented lines are details."],
        "decisions": ["'## decision' then '- rationale: ...', '- constraint: ...',",
                      "'- alternative: ...', '- consequence: ...' lines."],
        "procedures": ["'## title' then numbered steps '1. ...'."],
    }.get(kind, [])
    lines.append("Then: memcli view apply DIR --dry-run (the plan), memcli view apply DIR.")
    if scope.include_high:
        lines.append("This folder may hold `high` items in plain text: delete it when done.")
    return "\n".join(lines)


def render(kind: str, items: list[Item], scope: Scope, fmt: str) -> str:
    renderer = render_yaml if fmt == "yaml" else render_markdown
    return renderer(kind, items, header(kind, scope, fmt))


def parse(kind: str, name: str, text: str, fmt: str) -> list[Item]:
    return (parse_yaml if fmt == "yaml" else parse_markdown)(kind, name, text)


def _round_trip(kind: str, items: list[Item], scope: Scope, fmt: str
                ) -> tuple[str, list[Item], list[Item]]:
    """(file text, items with their lines, items left out): an item whose text cannot be a
    line (it holds a marker of its own, say) is left out, not shown wrong."""
    kept: list[Item] = []
    left_out: list[Item] = []
    try:  # the usual case: the whole file reads back as written
        whole = [i.value for i in parse(kind, "x", render(kind, items, scope, fmt), fmt)]
    except Exception:  # whatever a strange text does to the parser: item by item below
        whole = []
    if whole == [i.value for i in items]:
        kept = list(items)
    else:
        for item in items:
            try:
                ok = [i.value for i in parse(kind, "x", render(kind, [item], scope, fmt), fmt)]
            except Exception:
                ok = []
            (kept if ok == [item.value] else left_out).append(item)
    text = render(kind, kept, scope, fmt)
    parsed = parse(kind, file_name(kind, fmt), text, fmt)
    for item, back in zip(kept, parsed, strict=True):
        item.line = back.line
    return text, kept, left_out


def export_view(memory: MemoryHandle, directory: Path, scope: Scope, fmt: str,
                context_dir: Path | None, force: bool = False) -> dict[str, Any]:
    """Write the view into `directory` (created if needed); a summary of what was written.
    A view there with edits not applied yet is refused (they would be lost) unless `force`."""
    if fmt not in FORMATS:
        raise UsageError(f"unknown view format {fmt!r}", "use md or yaml")
    private.make_dirs(directory)
    previous = _old_files(directory, force)
    files: dict[str, Any] = {}
    counts: dict[str, int] = {}
    left: list[str] = []
    for kind, items in collect(memory, scope).items():
        name = file_name(kind, fmt)
        text, kept, left_out = _round_trip(kind, items, scope, fmt)
        private.write_text(directory / name, text)
        files[name] = {"items": {i.ref: {"line": i.line, "digest": i.digest()} for i in kept},
                       "file": digest(text)}
        counts[name] = len(kept)
        left += [i.ref for i in left_out if i.ref]
    for name, text in load_texts(context_dir).items():
        private.write_text(directory / f"{name}.md", text)
        files[f"{name}.md"] = {"digest": digest(text), "file": digest(text)}
    manifest = {"memcli_view": VERSION, "format": fmt, "scope": scope.as_json(), "files": files}
    private.write_text(directory / MANIFEST,
                       json.dumps(manifest, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    for stale in previous - set(files):  # an earlier export in the other format
        (directory / stale).unlink(missing_ok=True)
    return {"dir": str(directory), "format": fmt, **scope.as_json(), "items": counts,
            "left_out": sorted(left)}


def _old_files(directory: Path, force: bool) -> set[str]:
    """The files an earlier export wrote here; refused if one was edited since (not applied)."""
    try:
        old = json.loads((directory / MANIFEST).read_text(encoding="utf-8"))
        files = dict(old["files"])
    except (OSError, ValueError, KeyError, TypeError):
        return set()
    ours = {file_name(k, f) for k in KINDS for f in FORMATS} | {f"{n}.md" for n in TEXT_VIEWS}
    for name in sorted(set(files) & ours):
        try:
            text = (directory / name).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            text = None
        recorded = files[name].get("file") if isinstance(files[name], dict) else None
        if not force and (text is None or digest(text) != recorded):
            raise UsageError(f"{directory / name} was edited since its export (not applied)",
                             "run `memcli view apply` first, or give --force to overwrite it")
    return set(files) & ours
