"""Categories and per-agent allowlists from categories.yaml (bundled default or the user's file)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from memcli.errors import NotAllowedError, UsageError


@dataclass(frozen=True)
class Categories:
    names: tuple[str, ...]
    allowlists: dict[str, tuple[str, ...]]

    def allowed(self, agent: str | None) -> tuple[str, ...] | None:
        """Categories an agent may read; None means all of them."""
        if agent is None:
            return None
        allow = self.allowlists.get(agent, self.allowlists.get("default", ("*",)))
        return None if "*" in allow else allow

    def check(self, agent: str | None, requested: tuple[str, ...]) -> None:
        allowed = self.allowed(agent)
        if allowed is None:
            return
        refused = [c for c in requested if c not in allowed]
        if refused:
            raise NotAllowedError(
                f"agent {agent!r} may not read categor{'ies' if len(refused) > 1 else 'y'} "
                f"{', '.join(refused)}",
                f"its allowlist is: {', '.join(allowed) or 'empty'}",
            )


def load_categories(path: Path | None) -> Categories:
    import yaml

    from memcli.config import bundled_text

    try:
        text = path.read_text(encoding="utf-8") if path else bundled_text("categories.yaml")
        data = yaml.safe_load(text) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise UsageError(f"cannot read categories file {path}: {exc}".splitlines()[0]) from exc
    names = tuple(
        str(item["name"]) if isinstance(item, dict) else str(item)
        for item in data.get("categories", [])
    )
    allowlists = {
        str(agent): tuple(str(c) for c in (cats or []))
        for agent, cats in (data.get("allowlists") or {}).items()
    }
    return Categories(names, allowlists)
