"""Configuration: the ONLY module that reads environment variables and default paths.

Precedence, highest first: command-line flags (applied by the CLI), environment variables,
the config file (`$MEMCLI_CONFIG`, else `<config dir>/config.yaml`), built-in defaults.
The library receives a finished `Settings` object and never looks at the environment itself.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from memcli.errors import UsageError

APP = "memcli"


class EmbedderSettings(BaseModel):
    # "e5-small" is the offline default (see README: multilingual, best LoCoMo recall offline).
    provider: Literal["e5-small", "minilm", "openai", "hash", "none"] = "e5-small"
    base_url: str | None = None
    model: str | None = None
    dimension: int | None = None
    api_key: str | None = None


class LLMSettings(BaseModel):
    base_url: str | None = None
    model: str = "gpt-4o-mini"
    api_key: str | None = None
    timeout: float = 30.0
    price_in_per_mtok: float = 0.0
    price_out_per_mtok: float = 0.0
    daily_token_cap: int | None = None


class RetrievalSettings(BaseModel):
    """Ranking knobs; defaults and their reasons are documented in README.md."""

    fusion: Literal["zscore", "rrf"] = "zscore"
    rrf_k: int = 60
    leg_weights: dict[str, float] = Field(
        default_factory=lambda: {
            "lexical": 1.0, "sparse": 1.0, "dense": 1.0, "entity": 0.5, "trigram": 0.5,
        }
    )
    # Sparse query terms found in more than max(sparse_max_df, ratio * memories) memories are
    # dropped: their posting lists are long and they carry little signal.
    sparse_max_df: int = 2000
    sparse_max_df_ratio: float = 0.05
    candidates_per_leg: int = 200
    alpha: float = 1.0  # relevance
    beta: float = 0.1  # recency
    gamma: float = 0.1  # importance
    recency_half_life_days: float = 30.0
    min_session_hits: int = 3
    neighbour_weight: float = 0.5
    neighbour_pool: int = 50  # how many top candidates pull their neighbours into the pool
    session_weight: float = 0.25
    time_boost: float = 1.3  # "when" questions: turns holding a time expression
    speaker_boost: float = 1.1  # turns by a speaker the question names


class Settings(BaseModel):
    db: Path
    embedder: EmbedderSettings = Field(default_factory=EmbedderSettings)
    llm: LLMSettings = Field(default_factory=LLMSettings)
    retrieval: RetrievalSettings = Field(default_factory=RetrievalSettings)
    categories_file: Path | None = None
    encoding: str = "cl100k_base"


def _data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / APP


def _config_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / APP


def default_db_path() -> Path:
    return _data_dir() / "memory.db"


def config_file_path() -> Path:
    env = os.environ.get("MEMCLI_CONFIG")
    return Path(env) if env else _config_dir() / "config.yaml"


def _read_config_file(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    import yaml  # only when a config file exists

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise UsageError(f"cannot read config file {path}: {exc}".splitlines()[0]) from exc
    if not isinstance(data, dict):
        raise UsageError(f"config file {path} must hold a mapping")
    return data


# Environment variable -> (section, key). Documented in README.md ("Configuration").
_ENV = {
    "MEMCLI_EMBEDDER": ("embedder", "provider"),
    "MEMCLI_EMBED_BASE_URL": ("embedder", "base_url"),
    "MEMCLI_EMBED_MODEL": ("embedder", "model"),
    "MEMCLI_EMBED_DIMENSION": ("embedder", "dimension"),
    "MEMCLI_EMBED_API_KEY": ("embedder", "api_key"),
    "MEMCLI_LLM_BASE_URL": ("llm", "base_url"),
    "MEMCLI_LLM_MODEL": ("llm", "model"),
    "MEMCLI_LLM_API_KEY": ("llm", "api_key"),
    "MEMCLI_LLM_TIMEOUT": ("llm", "timeout"),
}


def load_settings(db: str | Path | None = None, **overrides: Any) -> Settings:
    """Build Settings from flags (`db`, `overrides`), the environment and the config file."""
    data = _read_config_file(config_file_path())
    for var, (section, key) in _ENV.items():
        value = os.environ.get(var)
        if value:
            data.setdefault(section, {})[key] = value
    if os.environ.get("OPENAI_API_KEY"):
        data.setdefault("llm", {}).setdefault("api_key", os.environ["OPENAI_API_KEY"])
    if os.environ.get("MEMCLI_CATEGORIES"):
        data["categories_file"] = os.environ["MEMCLI_CATEGORIES"]
    data["db"] = db or os.environ.get("MEMCLI_DB") or data.get("db") or default_db_path()
    for key, value in overrides.items():
        if value is not None:
            data[key] = value
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise UsageError(f"invalid setting {where}: {first['msg']}", "check memcli config") from exc


def bundled_text(name: str) -> str:
    """A data file shipped inside the package (schema.sql, categories.yaml, example data)."""
    return resources.files("memcli").joinpath(name).read_text(encoding="utf-8")
