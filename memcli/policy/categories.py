"""Categories and per-agent allowlists from categories.yaml (bundled default or the user's file)."""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memcli.config import bundled_text
from memcli.errors import NotAllowedError, UsageError, ValidationError

# Categories an agent only sees when its allowlist names them: "*" is not enough. Procedures are
# execution hints for agents that act (seed: "excluded from default conversational context").
RESTRICTED = ("procedural",)


@dataclass(frozen=True)
class Categories:
    names: tuple[str, ...]
    allowlists: dict[str, tuple[str, ...]]
    restricted: tuple[str, ...] = RESTRICTED
    # `context: all` categories, each with its bound (`rag_length`, else None): the bundle's
    # profile section loads them whole, without a query (section 5 of the memory system spec).
    always: dict[str, int | None] = field(default_factory=dict)
    # `free_categories: true`: a write may name a category the file does not declare.
    free: bool = False

    def _allowlist(self, agent: str) -> tuple[str, ...]:
        """The agent's allowlist, else the `default` entry's (as shipped: `"*"`, what a person
        reads). With neither (a file that removed `default:`) the agent is refused: that
        policy grants an agent it does not name nothing (the memory system spec)."""
        allow = self.allowlists.get(agent, self.allowlists.get("default"))
        if allow is None:
            raise NotAllowedError(
                f"agent {agent!r} has no category allowlist",
                "list it under `allowlists:` in categories.yaml, or add a `default:` entry "
                "for agents not listed")
        return allow

    def check_write(self, category: str | None) -> None:
        """A category a write names must be one the file declares, unless it allows free ones.
        The categories the code assigns itself (`knowledge`, `event`, ...) are not checked."""
        if category is None or self.free or category in self.names:
            return
        close = difflib.get_close_matches(category, self.names, n=3, cutoff=0.6)
        raise ValidationError(
            f"unknown category {category!r}",
            (f"did you mean {' or '.join(close)}? " if close else "")
            + "categories.yaml declares the categories; `free_categories: true` there "
            "accepts any")

    def allowed(self, agent: str | None) -> tuple[str, ...] | None:
        """Categories an agent may read; None means all of them (see `hidden` for the rest)."""
        if agent is None:
            return None
        allow = self._allowlist(agent)
        return None if "*" in allow else allow

    def hidden(self, agent: str | None, requested: tuple[str, ...] = ()) -> tuple[str, ...]:
        """Restricted categories to leave out of a query's results.

        An agent sees a restricted category only when its allowlist names it; a query with no
        agent (a person at the shell) sees it only when it asks for it with --category.
        """
        if agent is None:
            return tuple(c for c in self.restricted if c not in requested)
        allow = self._allowlist(agent)
        return tuple(c for c in self.restricted if c not in allow)

    def check(self, agent: str | None, requested: tuple[str, ...]) -> None:
        if agent is None:
            return
        allowed = self.allowed(agent)
        hidden = self.hidden(agent)
        refused = [c for c in requested
                   if c in hidden or (allowed is not None and c not in allowed)]
        if refused:
            shown = self._allowlist(agent)
            raise NotAllowedError(
                f"agent {agent!r} may not read categor{'ies' if len(refused) > 1 else 'y'} "
                f"{', '.join(refused)}",
                f"its allowlist is: {', '.join(shown) or 'empty'}"
                + (f"; {', '.join(hidden)} must be named explicitly" if hidden else ""),
            )


# The bundled categories.yaml, parsed, for the common case of no categories file of one's own:
# importing PyYAML costs ~20 ms of every `query`. Regenerate with
# `python -m memcli.policy.categories --write` after editing categories.yaml (a test checks the
# two).
DEFAULT_JSON = Path(__file__).with_name("categories_default.json")


def parse_categories(text: str, source: str) -> dict[str, Any]:
    """The mapping in a categories YAML text."""
    import yaml  # noqa: PLC0415 - only when a categories file is read

    try:
        # libyaml's loader when PyYAML has it: the same result, several times faster.
        data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}
    except yaml.YAMLError as exc:
        raise UsageError(f"cannot read categories file {source}: {exc}".splitlines()[0]) from exc
    if not isinstance(data, dict):
        raise UsageError(f"categories file {source} must hold a mapping")
    _check_shape(data, source)
    return data


def _check_shape(data: dict[str, Any], source: str) -> None:
    """categories: a list of names or {name: ...}; allowlists: agent -> list of categories;
    restricted: a list. Anything else is the file's mistake (exit 2), said as such."""
    def bad(what: str) -> UsageError:
        return UsageError(f"categories file {source}: {what}", "see categories.yaml")

    items = data.get("categories") or []
    if isinstance(items, dict):
        if not set(items) <= {"system", "custom"} or not all(
                isinstance(v, list | None) for v in items.values()):
            raise bad("`categories` must be a list, or `system:` and `custom:` lists")
        items = category_items(data)
    if not isinstance(items, list):
        raise bad("`categories` must be a list")
    for item in items:
        if isinstance(item, dict) and "name" not in item:
            raise bad("each category needs a `name`")
        if not isinstance(item, str | int | float | dict):
            raise bad(f"a category must be a name, not {item!r}")
    allowlists = data.get("allowlists") or {}
    if not isinstance(allowlists, dict) or not all(
            isinstance(cats, list | None) for cats in allowlists.values()):
        raise bad("`allowlists` must map each agent to a list of categories")
    if not isinstance(data.get("restricted") or [], list):
        raise bad("`restricted` must be a list")
    if not isinstance(data.get("free_categories", False), bool):
        raise bad("`free_categories` must be true or false")


def category_items(data: dict[str, Any]) -> list[Any]:
    """The declared categories: a list, or the memory system spec's `system:` and `custom:`
    lists (one after the other)."""
    items = data.get("categories") or []
    if isinstance(items, dict):
        return [*(items.get("system") or []), *(items.get("custom") or [])]
    return list(items)


def load_categories(path: Path | None) -> Categories:
    """The user's categories file, else the bundled default."""
    try:
        if path is None:
            data = json.loads(DEFAULT_JSON.read_text(encoding="utf-8"))
        else:
            data = parse_categories(path.read_text(encoding="utf-8"), str(path))
    except OSError as exc:
        raise UsageError(f"cannot read categories file {path}: {exc}".splitlines()[0]) from exc
    items = category_items(data)
    names = tuple(str(item["name"]) if isinstance(item, dict) else str(item) for item in items)
    allowlists = {
        str(agent): tuple(str(c) for c in (cats or []))
        for agent, cats in (data.get("allowlists") or {}).items()
    }
    restricted = tuple(str(c) for c in data.get("restricted", RESTRICTED) or ())
    return Categories(names, allowlists, restricted, context_all(items),
                      free=bool(data.get("free_categories", False)))


def context_all(items: list[Any]) -> dict[str, int | None]:
    """{category: rag_length or None} for the categories marked `context: all`."""
    out: dict[str, int | None] = {}
    for item in items:
        if isinstance(item, dict) and str(item.get("context", "rag")).lower() == "all":
            bound = item.get("rag_length")
            if bound is not None and (not isinstance(bound, int) or bound < 0):
                raise UsageError(f"category {item['name']}: rag_length must be a whole number >= 0")
            out[str(item["name"])] = bound
    return out


def default_json_text() -> str:
    """categories_default.json's content, from the bundled categories.yaml."""
    data = parse_categories(bundled_text("categories.yaml"), "categories.yaml")
    return json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["--write"]:
        DEFAULT_JSON.write_text(default_json_text(), encoding="utf-8")
        print(f"wrote {DEFAULT_JSON}")
    else:
        sys.stdout.write(default_json_text())
