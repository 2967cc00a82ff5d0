"""The model as the lifecycle steps see it: every reply recorded, every call under a daily cap.

`Model.ask()` checks the tenant's token budget for today, calls `LLMClient.complete_json`, and
the client's usage callback writes one `llm_usage` row per reply (failed replies cost tokens
too, so they are recorded as well). Budget exhaustion raises `LLMBudgetExceeded`, which the
commands treat as "stop here cleanly": what is already applied stays, the rest waits.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from memcli.core.records import utcnow
from memcli.providers.llm import LLMClient, LLMConfig, TokenBudget, Usage
from memcli.store import llm_usage_sql

if TYPE_CHECKING:
    import pydantic

    from memcli.config import LLMSettings
    from memcli.store.connection import Database

M = TypeVar("M", bound="pydantic.BaseModel")

NO_LLM = "no LLM configured"
NO_LLM_HINT = "set MEMCLI_LLM_BASE_URL or MEMCLI_LLM_API_KEY"


def llm_config(settings: LLMSettings) -> LLMConfig:
    return LLMConfig(
        base_url=settings.base_url,
        model=settings.model,
        api_key=settings.api_key,
        timeout=settings.timeout,
        max_retries=settings.max_retries,
        price_in_per_mtok=settings.price_in_per_mtok,
        price_out_per_mtok=settings.price_out_per_mtok,
    )


@dataclass
class Spend:
    calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    latency_ms: float = 0.0
    by_task: dict[str, int] = field(default_factory=dict)

    def add(self, task: str, usage: Usage) -> None:
        self.calls += 1
        self.tokens_in += usage.tokens_in
        self.tokens_out += usage.tokens_out
        self.cost_usd += usage.cost_usd
        self.latency_ms += usage.latency_ms
        self.by_task[task] = self.by_task.get(task, 0) + 1

    def as_dict(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "tokens_in": self.tokens_in,
            "tokens_out": self.tokens_out,
            "cost_usd": round(self.cost_usd, 6),
            "llm_ms": round(self.latency_ms, 1),
            "by_task": dict(self.by_task),
        }


class Model:
    """One command's access to the configured model, recording spend in `llm_usage`."""

    def __init__(
        self, db: Database, settings: LLMSettings, command: str, client: LLMClient | None = None
    ) -> None:
        self.db = db
        self.settings = settings
        self.command = command
        self.spend = Spend()
        self._tenant = "default"
        self.client = client or LLMClient(llm_config(settings), on_usage=self._record)
        if client is not None:
            client.on_usage = self._record

    @property
    def name(self) -> str:
        return self.settings.model

    def close(self) -> None:
        self.client.close()

    def cap(self, tenant_id: str) -> int | None:
        return self.settings.tenant_token_caps.get(tenant_id, self.settings.daily_token_cap)

    def used_today(self, tenant_id: str) -> int:
        return llm_usage_sql.tokens_on_day(self.db, tenant_id, _today())

    def check_budget(self, tenant_id: str) -> None:
        TokenBudget().check(tenant_id, self.used_today(tenant_id), self.cap(tenant_id))

    def ask(self, task: str, system: str, user: str, schema: type[M], *, tenant_id: str) -> M:
        """Validated reply, or LLMBadReply / LLMUnavailable / LLMBudgetExceeded / LLMError."""
        self.check_budget(tenant_id)
        self._tenant = tenant_id
        return self.client.complete_json(task, system, user, schema)

    def _record(self, task: str, usage: Usage) -> None:
        self.spend.add(task, usage)
        now = utcnow()
        with self.db.transaction():
            llm_usage_sql.record_usage(
                self.db,
                {
                    "ts": now,
                    "day": now[:10],
                    "tenant_id": self._tenant,
                    "command": self.command,
                    "task": task,
                    "model": usage.model,
                    "tokens_in": usage.tokens_in,
                    "tokens_out": usage.tokens_out,
                    "cost_usd": usage.cost_usd,
                    "latency_ms": usage.latency_ms,
                    "estimated": int(usage.estimated),
                },
            )


def make_model(db: Database, settings: LLMSettings, command: str) -> Model | None:
    """The model for a command, or None when no endpoint is configured (model-free parts only)."""
    if not llm_config(settings).configured:
        return None
    return Model(db, settings, command)


def _today() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d")


def usage_report(
    db: Database, days: int | None = None, tenant_id: str | None = None
) -> dict[str, Any]:
    """Model spend per day and command (and per command, per day, in total)."""
    since = None
    if days is not None:
        since = (datetime.now(UTC) - timedelta(days=days - 1)).strftime("%Y-%m-%d")
    return llm_usage_sql.usage_report(db, since, tenant_id)
