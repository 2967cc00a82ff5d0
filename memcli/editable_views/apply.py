"""`memcli view apply DIR`: a person's edits to a view become ordinary writes.

A three-way comparison per item, against the manifest `view export` wrote (`view.json`):
- the file's value equals the exported one: untouched, nothing happens (even if the database
  moved on since: an item an agent added after the export is not in the manifest, so it is
  never taken for a deleted line);
- it differs, and the database still holds the exported value: an edit, written the way a
  person would write it (`correct` for facts, preferences and procedures, `decision supersede`,
  `task update`): the old version is superseded and kept, history names the file and line;
- a manifest item missing from its file: a soft delete (`forget`, restorable for 30 days);
- a line with no marker: a new item (`remember`, `decision add`, `task add`).
An edit or deletion of an item the database changed meanwhile, a marker that is not the view's
(unknown, copied, of another file, or of another user or tenant: the manifest only holds the
view's own, and every write goes to an item of the scope's current selection), a duplicated
marker or a line it cannot read is refused with `FILE:LINE: what`, exit 2, before any write.

Every write runs in one transaction, so an apply is all or nothing; the library functions do
their own redaction (memcli.policy.redaction), so what a person types is redacted like any other
write.
identity.md and rules.md, when changed, are written to the context dir (the user's copy that
`memcli acb edit` would open), redacted too. After applying, the view is exported again, so the
files carry the new markers and applying twice changes nothing more.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from memcli.acb.sections import view_path
from memcli.core import private
from memcli.editable_views.export import (
    MANIFEST,
    VERSION,
    Scope,
    collect,
    file_name,
    load_texts,
    parse,
)
from memcli.editable_views.format import (
    KINDS,
    PREFIX,
    TEXT_VIEWS,
    Item,
    bad,
    digest,
    render_procedure_text,
)
from memcli.errors import MemcliError, UsageError
from memcli.ledger import entries
from memcli.lifecycle.correct import correct_fact
from memcli.lifecycle.purge import forget
from memcli.lifecycle.remember import MAX_FACT, procedure_steps, remember
from memcli.policy.redaction import redact_text

if TYPE_CHECKING:
    from memcli.store.handle import MemoryHandle

ACTOR = "view"
_ORDER = {"delete": 0, "edit": 1, "add": 2, "write": 3}


@dataclass
class Change:
    action: str  # add, edit, delete, write
    file: str
    line: int | None
    kind: str
    ref: str | None = None
    new: Item | None = None  # the file's item (add, edit)
    old: Item | None = None  # the database's item (edit, delete)
    text: str = ""  # identity / rules: the new text
    result: dict[str, Any] = field(default_factory=dict)

    @property
    def reason(self) -> str:
        deleted = " (deleted)" if self.action == "delete" else ""
        return f"view apply: {self.file} line {self.line}{deleted}"

    def as_json(self) -> dict[str, Any]:
        item = self.new or self.old
        shown = self.text if item is None else item.text()
        out = {"file": self.file, "line": self.line, "action": self.action, "id": self.ref,
               "text": redact_text(shown)[0]}
        return out | self.result


@dataclass
class Plan:
    scope: Scope
    fmt: str
    changes: list[Change]
    unchanged: int

    def as_json(self, dry_run: bool) -> dict[str, Any]:
        return {"dry_run": dry_run, **self.scope.as_json(), "format": self.fmt,
                "changes": [c.as_json() for c in self.changes], "unchanged": self.unchanged}


# -- reading the folder ----------------------------------------------------------------------
def read_manifest(directory: Path) -> dict[str, Any]:
    path = directory / MANIFEST
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"no view in {directory} ({MANIFEST} is missing)",
                         f"run `memcli view export {directory}` first") from None
    except (ValueError, UnicodeDecodeError):
        raise UsageError(f"{path}: not a view manifest", "export the view again") from None
    if not isinstance(manifest, dict) or manifest.get("memcli_view") != VERSION:
        raise UsageError(f"{path}: not a view manifest of this memcli version",
                         "export the view again")
    if not _well_formed(manifest.get("files")):
        raise UsageError(f"{path}: damaged (it is memcli's record of the export, not for "
                         "editing)", "export the view again (--force) and redo the edits")
    return manifest


def _well_formed(files: Any) -> bool:
    if not isinstance(files, dict) or not all(isinstance(f, dict) for f in files.values()):
        return False
    for f in files.values():
        items = f.get("items", {})
        if not isinstance(items, dict) or not all(
                isinstance(v, dict) and isinstance(v.get("digest"), str)
                and isinstance(v.get("line"), int) for v in items.values()):
            return False
    return True


def _read(directory: Path, name: str) -> str:
    path = directory / name
    try:
        return path.read_text(encoding="utf-8-sig")  # an editor's BOM is not content
    except FileNotFoundError:
        raise UsageError(f"{path}: missing",
                         "restore it; to forget every item in it, leave it empty") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not UTF-8 text") from None


def _scope(manifest: dict[str, Any], tenant: str) -> Scope:
    try:
        s = manifest["scope"]
        scope = Scope(s["tenant"], s["user"], s["app"], bool(s["include_high"]))
    except (KeyError, TypeError):
        raise UsageError(f"{MANIFEST}: no scope", "export the view again") from None
    if scope.tenant_id != tenant:
        raise UsageError(f"the view is of tenant {scope.tenant_id!r}, not {tenant!r}",
                         f"give --tenant-id {scope.tenant_id}")
    return scope


# -- the plan --------------------------------------------------------------------------------
def plan_apply(memory: MemoryHandle, directory: Path, *, tenant: str | None = None,
               context_dir: Path | None = None) -> Plan:
    """What applying the folder would do; a UsageError naming FILE:LINE if it cannot map an
    edit. Reads only."""
    manifest = read_manifest(directory)
    scope = _scope(manifest, tenant or memory.tenant)
    fmt = manifest.get("format")
    if fmt not in ("md", "yaml"):
        raise UsageError(f"{MANIFEST}: unknown format {fmt!r}", "export the view again")
    files = manifest.get("files") or {}
    current: dict[str, dict[str, Item]] = {
        kind: {i.ref: i for i in items if i.ref}
        for kind, items in collect(memory, scope).items()
    }
    owner = {ref: name for name, f in files.items() for ref in (f.get("items") or {})}
    seen: dict[str, str] = {}
    changes: list[Change] = []
    unchanged = 0
    for kind in KINDS:
        name = file_name(kind, fmt)
        exported = (files.get(name) or {}).get("items") or {}
        for item in parse(kind, name, _read(directory, name), fmt):
            where = f"{name}:{item.line}"
            if item.ref is None:
                _check_new(memory, item, where)
                changes.append(Change("add", name, item.line, kind, None, new=item))
                continue
            if item.ref in seen:
                raise bad(where, f"{item.ref} appears twice (also at {seen[item.ref]})",
                          "each marker belongs to one line")
            seen[item.ref] = where
            base = exported.get(item.ref)
            if base is None:
                _foreign(kind, item.ref, where, owner.get(item.ref))
            if item.digest() == base["digest"]:
                unchanged += 1
                continue
            old = _still(current[kind], item.ref, base, where, scope.include_high)
            _check_edit(memory, old, item, where)
            changes.append(Change("edit", name, item.line, kind, item.ref, new=item, old=old))
        for ref in sorted(set(exported) - {r for r in seen if seen[r].startswith(name + ":")}):
            base = exported[ref]
            where = f"{name}:{base['line']}"
            old = _still(current[kind], ref, base, f"{where} (deleted line)",
                         scope.include_high)
            changes.append(Change("delete", name, base["line"], kind, ref, old=old))
    texts = load_texts(context_dir)
    for view in TEXT_VIEWS:
        name = f"{view}.md"
        text = _read(directory, name)
        base = (files.get(name) or {}).get("digest")
        if digest(text) == base:
            continue
        if digest(texts[view]) != base:
            raise bad(f"{name}:1", "changed in the context dir since the export",
                      "export the view again and redo the edit")
        changes.append(Change("write", name, 1, view, text=text))
    changes.sort(key=lambda c: (_ORDER[c.action], KINDS.index(c.kind) if c.kind in KINDS
                                else len(KINDS), c.line or 0))
    return Plan(scope, fmt, changes, unchanged)


def _foreign(kind: str, ref: str, where: str, home: str | None) -> NoReturn:
    if ref[0] != PREFIX[kind]:
        raise bad(where, f"{ref} is not a marker of {kind}",
                  f"{kind} markers start with {PREFIX[kind]}:")
    if home is not None:
        raise bad(where, f"{ref} is an item of {home}",
                  "an item cannot move between files: delete it there and add its text "
                  "here without the marker")
    raise bad(where, f"{ref} is not an item of this view",
              "a changed or copied marker? keep each marker as exported, or export again")


def _still(current: dict[str, Item], ref: str, base: dict[str, Any], where: str,
           high: bool) -> Item:
    """The database's item `ref`, if it still holds the exported value."""
    item = current.get(ref)
    if item is None or item.digest() != base["digest"]:
        key = " (a `high` item needs the key)" if high and item is None else ""
        raise bad(where, f"{ref} changed in the database since the export",
                  f"export the view again and redo this edit{key}")
    return item


def _check_new(memory: MemoryHandle, item: Item, where: str) -> None:
    if item.kind == "facts" and item.value["category"] not in memory.categories.names:
        raise bad(where, f"unknown category {item.value['category']!r}",
                  "use a category of categories.yaml as the heading")
    _check_text(item, where)


def _check_edit(memory: MemoryHandle, old: Item, new: Item, where: str) -> None:
    if new.kind == "facts" and new.value["category"] != old.value["category"]:
        raise bad(where, f"{new.ref} moved from category {old.value['category']!r} to "
                  f"{new.value['category']!r}",
                  "to recategorise, delete the line and add it again without its marker")
    _check_text(new, where)


def _check_text(item: Item, where: str) -> None:
    """The checks the write itself would make, here, so a refusal names the line."""
    text = item.value.get("text", "")
    if len(text) > MAX_FACT:
        raise bad(where, f"a fact is at most {MAX_FACT} characters ({len(text)} given)")
    if item.kind == "procedures":
        try:
            procedure_steps(None, item.value["steps"])
        except UsageError as exc:
            raise bad(where, exc.message, exc.hint) from None


# -- applying --------------------------------------------------------------------------------
def apply_plan(memory: MemoryHandle, plan: Plan, context_dir: Path | None) -> Plan:
    """Make the plan's changes: the database ones in one transaction, then identity/rules."""
    with memory.db.transaction():
        for change in plan.changes:
            if change.action == "write":
                continue
            try:
                change.result = _apply(memory, plan.scope, change)
            except MemcliError as exc:  # the whole transaction rolls back
                raise type(exc)(f"{change.file}:{change.line}: {exc.message}",
                                exc.hint) from None
    for change in plan.changes:
        if change.action != "write":
            continue
        if context_dir is None:
            raise UsageError("no context dir configured", "set MEMCLI_CONTEXT_DIR")
        path = view_path(change.kind, context_dir) or context_dir / f"{change.kind}.md"
        text, found = redact_text(change.text)
        private.make_dirs(path.parent)
        private.write_text(path, text)
        change.result = {"path": str(path), "redacted": found}
    return plan


def _apply(memory: MemoryHandle, scope: Scope, change: Change) -> dict[str, Any]:
    owner: dict[str, Any] = {"tenant_id": scope.tenant_id, "user_id": scope.user_id,
                             "app_id": scope.app_id}
    mine = memory.owner(scope.tenant_id)  # the rows the view's manifest names: its tenant's
    old, new, kind, reason = change.old, change.new, change.kind, change.reason
    if change.action == "delete":
        assert old is not None
        forget(memory.db, old.extra["memory_id"], owner=mine, actor=ACTOR, reason=reason)
        return {"forgot": f"m:{old.extra['memory_id']}"}
    assert new is not None
    v = new.value
    lists = {k: v[k] for k in ("rationale", "constraints", "alternatives", "consequences")
             if k in v}
    if change.action == "edit":
        assert old is not None
        if kind == "decisions":
            out = entries.supersede_decision(memory, old.extra["id"], v["decision"], owner=mine,
                                            refs=old.extra["refs"], reason=reason, **lists)
            return {"new_id": f"d:{out['id']}", "redacted": out["redacted"]}
        if kind == "tasks":
            out = entries.update_task(memory, old.extra["id"], status=v["status"], owner=mine,
                                     title=v["title"], details=v["details"], reason=reason)
            return {"new_id": f"t:{out['id']}", "redacted": out["redacted"]}
        text = (render_procedure_text(v["title"], v["steps"]) if kind == "procedures"
                else v["text"])
        out = correct_fact(memory, old.extra["id"], text, reason=reason, owner=mine)
        return {"new_id": f"m:{out['id']}", "redacted": out["redacted"]}
    if kind == "decisions":
        out = entries.add_decision(memory, v["decision"], **lists, **owner)
        return {"new_id": f"d:{out['id']}", "redacted": out["redacted"]}
    if kind == "tasks":
        out = entries.add_task(memory, v["title"], details=v["details"], status=v["status"],
                              **owner)
        return {"new_id": f"t:{out['id']}", "redacted": out["redacted"]}
    if kind == "procedures":
        out = remember(memory, memory.lifecycle, text=None, procedural=True, steps=v["steps"],
                       title=v["title"], **owner)
    else:
        category = "preferences" if kind == "preferences" else v["category"]
        out = remember(memory, memory.lifecycle, text=v["text"], category=category, **owner)
    result = {"new_id": f"m:{out['id']}", "redacted": out["redacted"]}
    if out.get("status") == "merged":  # a near-duplicate of a fact already there
        result["merged"] = True
    return result
