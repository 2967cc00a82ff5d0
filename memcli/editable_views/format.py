"""The items of a view and their markdown form (`facts.md`, `tasks.md` ...).

Every item is a canonical value (whitespace-normalised text, lists of steps or rationale ...)
and, when it exists in the database, a marker: `m:ID` (a memory), `d:ID` (a decision), `t:ID`
(a task). Rendering and parsing are inverse on those values, so an untouched line parses back
to the value it was rendered from, whatever a person's editor does to blank lines or spacing.

    facts.md        ## category / - text <!-- m:12 -->
    preferences.md  - text <!-- m:14 -->
    decisions.md    ## decision <!-- d:3 --> / - rationale: ... (constraint, alternative,
                    consequence)
    tasks.md        - [ ] title <!-- t:4 --> ([ ] open, [/] doing, [x] done), indented details
    procedures.md   ## title <!-- m:20 --> / 1. step
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from memcli.errors import UsageError

KINDS = ("facts", "preferences", "decisions", "tasks", "procedures")
TEXT_VIEWS = ("identity", "rules")  # whole texts (memcli.acb.sections views), copied verbatim
PREFIX = {"facts": "m", "preferences": "m", "procedures": "m", "decisions": "d", "tasks": "t"}
TITLES = {"facts": "Facts", "preferences": "Preferences", "decisions": "Active decisions",
          "tasks": "Open tasks", "procedures": "Procedures"}
DECISION_LISTS = ("rationale", "constraints", "alternatives", "consequences")
NO_CATEGORY = "(none)"
UNTITLED = "(untitled)"
DEFAULT_CATEGORY = "knowledge"  # `remember`'s: a fact line above every heading
TASK_STATUSES = ("open", "doing", "done")
BOXES = {" ": "open", "/": "doing", "x": "done", "X": "done"}
BOX_OF = {"open": " ", "doing": "/", "done": "x"}

_MARKER = re.compile(r"^(?P<body>.*?)\s*<!--\s*(?P<ref>[^<>]*?)\s*-->\s*$")
_REF = re.compile(r"^([mdt]):([1-9][0-9]*)$")
_BULLET = re.compile(r"^[-*+]\s+(?P<text>.*)$")
_TASK = re.compile(r"^[-*+]\s+\[(?P<box>[ /xX])\]\s*(?P<text>.*)$")
_STEP = re.compile(r"^(?:\d+[.)]|[-*+])\s+(?P<text>.*)$")
_FIELD = re.compile(r"^[-*+]\s+(?P<label>[A-Za-z]+)\s*:\s*(?P<text>.*)$")
_LABELS = {"rationale": "rationale", "reason": "rationale", "constraint": "constraints",
           "constraints": "constraints", "alternative": "alternatives",
           "alternatives": "alternatives", "consequence": "consequences",
           "consequences": "consequences"}


@dataclass
class Item:
    """One fact, preference, decision, task or procedure: `ref` None is a new one."""

    kind: str
    ref: str | None
    value: dict[str, Any]
    line: int = 0
    extra: dict[str, Any] = field(default_factory=dict)  # db-side data apply needs (ids)

    def digest(self) -> str:
        return digest(self.value)

    def text(self) -> str:
        """One line saying what the item is (plan output)."""
        v = self.value
        if self.kind == "decisions":
            extra = [f"{k}: {', '.join(v[k])}" for k in DECISION_LISTS if v[k]]
            return "; ".join([v["decision"], *extra])
        if self.kind == "tasks":
            return f"[{v['status']}] {v['title']}" + (f": {v['details']}" if v["details"]
                                                       else "")
        if self.kind == "procedures":
            return f"{v['title'] or UNTITLED}: " + "; ".join(v["steps"])
        return v["text"]


def digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, ensure_ascii=False)
                          .encode("utf-8")).hexdigest()[:16]


def norm(text: str | None) -> str:
    return " ".join((text or "").split())


def norm_details(text: str | None) -> str:
    return "\n".join(n for n in (norm(line) for line in (text or "").splitlines()) if n)


def bad(where: str, what: str, hint: str | None = None) -> UsageError:
    return UsageError(f"{where}: {what}", hint)


# -- values from database rows ---------------------------------------------------------------
def procedure_value(content: str, attributes: dict[str, Any]) -> dict[str, Any]:
    """Title and steps of a procedure memory: the ones `remember` recorded when the text is
    still theirs, else read from the text (a corrected procedure has no recorded steps)."""
    steps, title = attributes.get("steps"), attributes.get("title")
    if steps and render_procedure_text(title, steps) == content:
        return {"title": norm(title) or None, "steps": [norm(s) for s in steps]}
    lines = [ln for ln in content.splitlines() if ln.strip()]
    title = None
    if lines and not _STEP.match(lines[0].strip()):
        title = norm(lines.pop(0))
    out = []
    for ln in lines:
        m = _STEP.match(ln.strip())
        out.append(norm(m.group("text") if m else ln))
    return {"title": title, "steps": out}


def render_procedure_text(title: str | None, steps: list[str]) -> str:
    """A procedure memory's text, as `remember --procedural` writes it."""
    body = "\n".join(f"{i}. {s}" for i, s in enumerate(steps, start=1))
    return f"{title.strip()}\n{body}" if title and title.strip() else body


# -- markdown: rendering ---------------------------------------------------------------------
def render_markdown(kind: str, items: list[Item], header: str) -> str:
    """The file: the header comment, a `# title`, then the items (blocks apart by a blank
    line)."""
    blocks: list[list[str]] = []
    category: object = object()  # no heading yet
    for item in items:
        v, mark = item.value, f"<!-- {item.ref} -->"
        if kind == "facts":
            if v["category"] != category:
                category = v["category"]
                blocks.append([f"## {v['category'] or NO_CATEGORY}", ""])
            blocks[-1].append(f"- {v['text']} {mark}")
        elif kind in ("preferences", "tasks"):
            if not blocks:
                blocks.append([])
            if kind == "preferences":
                blocks[-1].append(f"- {v['text']} {mark}")
            else:
                blocks[-1].append(f"- [{BOX_OF[v['status']]}] {v['title']} {mark}")
                blocks[-1] += [f"  {line}" for line in v["details"].splitlines()]
        elif kind == "decisions":
            lines = [f"- {key}: {entry}" for key in DECISION_LISTS for entry in v[key]]
            blocks.append([f"## {v['decision']} {mark}", *([""] + lines if lines else [])])
        else:
            steps = [f"{i}. {s}" for i, s in enumerate(v["steps"], start=1)]
            blocks.append([f"## {v['title'] or UNTITLED} {mark}", "", *steps])
    out = ["<!--", *header.splitlines(), "-->", f"# {TITLES[kind]}"]
    for block in blocks:
        out += ["", *block]
    return "\n".join(out) + "\n"


# -- markdown: parsing -----------------------------------------------------------------------
def split_marker(body: str, where: str) -> tuple[str, str | None]:
    """(text, ref) of a line's content: the `<!-- m:12 -->` at its end, if any."""
    m = _MARKER.match(body)
    if m is None:
        if "<!--" in body or "-->" in body:
            raise bad(where, "a broken <!-- marker -->", "keep each marker exactly as exported")
        return body, None
    text, ref = m.group("body"), m.group("ref")
    if "<!--" in text or "-->" in text:
        raise bad(where, "more than one marker on a line", "one item per line")
    return text, split_ref(ref, where)


def split_ref(ref: str, where: str) -> str:
    """A marker's `m:12`, checked."""
    if not _REF.match(ref.strip()):
        raise bad(where, f"malformed marker {ref!r}", "keep each marker exactly as exported")
    return ref.strip()


def body_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) after the leading comment block and the `# title` line."""
    lines = text.splitlines()
    out, i = [], 0
    while i < len(lines) and not lines[i].strip():
        i += 1
    if i < len(lines) and lines[i].lstrip().startswith("<!--") and not _MARKER.match(lines[i]):
        while i < len(lines) and "-->" not in lines[i]:
            i += 1
        i += 1  # the closing line
    for n in range(i, len(lines)):
        line = lines[n].rstrip()
        if line.strip() and not re.match(r"^#\s", line):  # blank lines and the title
            out.append((n + 1, line))
    return out


def parse_markdown(kind: str, name: str, text: str) -> list[Item]:
    """The items of a markdown view file; a line it cannot read is a UsageError naming it."""
    lines = body_lines(text)
    parse = {"facts": _facts, "preferences": _facts, "tasks": _tasks,
             "decisions": _decisions, "procedures": _procedures}[kind]
    return parse(kind, name, lines)


def _heading(line: str) -> str | None:
    return line[3:].strip() if line.startswith("## ") else None


def _facts(kind: str, name: str, lines: list[tuple[int, str]]) -> list[Item]:
    items: list[Item] = []
    category: str | None = DEFAULT_CATEGORY
    for n, line in lines:
        where = f"{name}:{n}"
        heading = _heading(line)
        if heading is not None and kind == "facts":
            if "<!--" in heading or not heading:
                raise bad(where, "a heading is a category name", "e.g. '## preferences'")
            category = None if heading == NO_CATEGORY else heading
            continue
        m = _BULLET.match(line)
        if m is None:
            shape = "'## category' or '- text'" if kind == "facts" else "'- text'"
            raise bad(where, "cannot read this line", f"a line is {shape}")
        body, ref = split_marker(m.group("text"), where)
        if not norm(body):
            raise bad(where, "an empty item", "delete the line to forget it")
        value = {"category": category, "text": norm(body)} if kind == "facts" else {
            "text": norm(body)}
        items.append(Item(kind, ref, value, n))
    return items


def _tasks(kind: str, name: str, lines: list[tuple[int, str]]) -> list[Item]:
    items: list[Item] = []
    for n, line in lines:
        where = f"{name}:{n}"
        if line[:1] in (" ", "\t"):
            if not items:
                raise bad(where, "an indented line before any task", "details follow a task")
            details = items[-1].value["details"]
            items[-1].value["details"] = norm_details(f"{details}\n{line}")
            continue
        m = _TASK.match(line) or _BULLET.match(line)  # no box: an open task
        if m is None:
            raise bad(where, "cannot read this line",
                      "a task is '- [ ] title' ([ ] open, [/] doing, [x] done), details indented")
        box = m.groupdict().get("box") or " "
        body, ref = split_marker(m.group("text"), where)
        if not norm(body):
            raise bad(where, "a task without a title", "delete the line to forget it")
        value = {"status": BOXES[box], "title": norm(body), "details": ""}
        items.append(Item(kind, ref, value, n))
    return items


def _blocks(kind: str, name: str, lines: list[tuple[int, str]], head: Callable[[str, str], dict],
            entry: Callable[[str], tuple[str, str] | None], shape: str, heading_of: str
            ) -> list[Item]:
    """Items of a file of blocks: a '## ' heading opens one (`head` makes its value from the
    heading's text), each line under it adds to one of its lists (`entry`: which list, what
    text; None: not such a line). `shape` is the hint for an unreadable line."""
    items: list[Item] = []
    for n, line in lines:
        where = f"{name}:{n}"
        heading = _heading(line)
        if heading is not None:
            body, ref = split_marker(heading, where)
            items.append(Item(kind, ref, head(norm(body), where), n))
            continue
        found = entry(line)
        if found is None or not items:
            raise bad(where, "cannot read this line", shape)
        if "<!--" in line:
            raise bad(where, f"a marker belongs on the '## {heading_of}' line")
        if norm(found[1]):
            items[-1].value[found[0]].append(norm(found[1]))
    return items


def _decision_head(text: str, where: str) -> dict[str, Any]:
    if not text:
        raise bad(where, "a decision without its text", "delete the block to forget it")
    return {"decision": text, **{k: [] for k in DECISION_LISTS}}


def _decision_entry(line: str) -> tuple[str, str] | None:
    m = _FIELD.match(line)
    label = _LABELS.get(m.group("label").lower()) if m else None
    return None if m is None or label is None else (label, m.group("text"))


def _decisions(kind: str, name: str, lines: list[tuple[int, str]]) -> list[Item]:
    return _blocks(kind, name, lines, _decision_head, _decision_entry,
                   "a decision is '## text', then lines "
                   "'- rationale: ...' (or constraint, alternative, consequence)", "decision")


def _procedure_head(title: str, where: str) -> dict[str, Any]:
    return {"title": None if title in ("", UNTITLED) else title, "steps": []}


def _procedure_entry(line: str) -> tuple[str, str] | None:
    m = _STEP.match(line)
    return None if m is None else ("steps", m.group("text"))


def _procedures(kind: str, name: str, lines: list[tuple[int, str]]) -> list[Item]:
    items = _blocks(kind, name, lines, _procedure_head, _procedure_entry,
                    "a procedure is '## title', then numbered steps '1. ...'", "title")
    for item in items:
        if not item.value["steps"]:
            raise bad(f"{name}:{item.line}", "a procedure without steps",
                      "add numbered steps, or delete the block to forget it")
    return items
