"""OpenAI-compatible LLM client for the model-backed steps (consolidate, reflect, insights).

One call shape only: a system and a user message in, one JSON object out, validated against a
pydantic model. It talks to any server that speaks the chat completions API (OpenAI, Ollama,
llama.cpp server, vLLM) through the official `openai` client pointed at `base_url`.

Design choices, and why:
- `import openai` costs about a second, so it happens on the first call, never at import time;
  commands that never reach a model do not pay for it.
- The library never reads environment variables: `base_url` and `api_key` are always passed to
  the `openai` client explicitly, so it does not fall back to `OPENAI_BASE_URL`/`OPENAI_API_KEY`
  behind the config layer's back.
- Transport failures (refused, timeout, 5xx, 429) are retried by the `openai` client itself,
  `max_retries` times, and then become `LLMUnavailable`.
- A reply that is not a valid JSON object for the schema gets exactly one repair turn: the bad
  reply and the reason go back to the model. Small local models often fix a missing field when
  told which one; a second failure is not worth more tokens and raises `LLMBadReply`, which the
  lifecycle steps treat as "skip the model part, keep the deterministic part".
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from memcli.errors import MemcliError

if TYPE_CHECKING:
    import openai
    import pydantic

__all__ = [
    "LLMBadReply",
    "LLMBudgetExceeded",
    "LLMClient",
    "LLMConfig",
    "LLMError",
    "LLMUnavailable",
    "TokenBudget",
    "Usage",
    "extract_json_object",
]

OPENAI_BASE_URL = "https://api.openai.com/v1"
# Local servers (Ollama, llama.cpp, vLLM) ignore the key, but the openai client refuses to start
# without one and would otherwise read OPENAI_API_KEY from the environment.
_PLACEHOLDER_KEY = "not-needed"
_RAW_LIMIT = 500
# Status codes some servers use to reject a `response_format` they do not support.
_REJECTS_JSON_MODE = (400, 422)

M = TypeVar("M", bound="pydantic.BaseModel")


@dataclass
class LLMConfig:
    """Where and how to reach the model; built by `memcli.config`, never from the environment."""

    base_url: str | None
    model: str
    api_key: str | None = None
    timeout: float = 30.0
    max_retries: int = 1
    price_in_per_mtok: float = 0.0
    price_out_per_mtok: float = 0.0

    @property
    def configured(self) -> bool:
        """True when there is an endpoint to talk to (a local base_url, or a key for OpenAI)."""
        return bool(self.base_url or self.api_key)

    @property
    def endpoint(self) -> str:
        return self.base_url or OPENAI_BASE_URL

    def cost(self, tokens_in: int, tokens_out: int) -> float:
        return (tokens_in * self.price_in_per_mtok + tokens_out * self.price_out_per_mtok) / 1e6


@dataclass
class Usage:
    """What one model call cost; `estimated` when the server sent no token counts (chars/4)."""

    model: str
    tokens_in: int
    tokens_out: int
    cost_usd: float
    latency_ms: float
    estimated: bool = False


class LLMError(MemcliError):
    """Any failure of a model-backed step. Exit code 1."""


class LLMUnavailable(LLMError):
    """No endpoint configured, connection refused, timeout or server error after retries."""


class LLMBadReply(LLMError):
    """The model answered, but not with a JSON object that fits the schema."""

    def __init__(self, task: str, reason: str, raw: str | None) -> None:
        self.task = task
        self.reason = reason
        self.raw = (raw or "")[:_RAW_LIMIT]
        super().__init__(
            f"LLM reply for {task!r} is not usable: {reason}",
            "a larger or instruction-tuned model usually fixes this; .raw holds the reply",
        )


class LLMBudgetExceeded(LLMError):
    """The tenant used its daily token allowance."""


class TokenBudget:
    """Guards a daily token cap; the store counts the tokens, this only decides."""

    def check(self, tenant_id: str, used_today: int, cap: int | None) -> None:
        """Raise `LLMBudgetExceeded` when `used_today` has reached `cap` (None: no cap)."""
        if cap is None or used_today < cap:
            return
        raise LLMBudgetExceeded(
            f"daily LLM token budget used up for tenant {tenant_id!r}: "
            f"{used_today:,} of {cap:,} tokens today",
            "raise llm.daily_token_cap in the config, or wait for the daily reset",
        )


# --- reply parsing -------------------------------------------------------------------------------

_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"```[ \t]*(?:json|JSON)?[ \t]*\n?(.*?)```", re.DOTALL)


def extract_json_object(text: str) -> dict[str, Any]:
    """Return the JSON object in a model reply; raise ValueError with a short reason if none.

    Accepts a bare object, one inside a ``` fence, or one surrounded by chatter (the outermost
    `{...}`). Reasoning models (deepseek-r1, qwen3 via Ollama) put a <think> block first, which
    may itself hold braces, so it is dropped before looking.
    """
    text = _THINK.sub("", text).strip()
    fenced = _FENCE.search(text)
    if fenced:
        text = fenced.group(1).strip()
    if not text:
        raise ValueError("empty reply")
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        value = _outermost_object(text, exc)
    if not isinstance(value, dict):
        raise ValueError(f"expected a JSON object, got {type(value).__name__}")
    return value


def _outermost_object(text: str, first_error: json.JSONDecodeError) -> Any:
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        raise ValueError(f"not JSON: {first_error.msg} at char {first_error.pos}")
    try:
        return json.loads(text[start : end + 1])
    except json.JSONDecodeError:
        pass
    # Chatter after the object may itself contain a "}": decode just the first object.
    try:
        return json.JSONDecoder().raw_decode(text, start)[0]
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON: {exc.msg} at char {exc.pos}") from None


def _validation_reason(exc: pydantic.ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err["loc"]) or "(root)"
        parts.append(f"{where}: {err['msg']}")
    more = exc.error_count() - len(parts)
    return "schema mismatch: " + "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


def _estimate_tokens(text: str) -> int:
    # chars/4 is within about 10 % of cl100k (see DEPENDENCIES.md) and needs no tokenizer load.
    return (len(text) + 3) // 4


# --- client --------------------------------------------------------------------------------------


class LLMClient:
    """Structured JSON completions against one configured endpoint.

    `on_usage(task, usage)` is called once per model reply (including a failed one), so the
    caller can record spend and check budgets even when the reply was unusable.
    """

    def __init__(
        self, config: LLMConfig, on_usage: Callable[[str, Usage], None] | None = None
    ) -> None:
        self.config = config
        self.on_usage = on_usage
        self._client: openai.OpenAI | None = None
        # Flipped off for the life of this client once the server has shown it rejects JSON mode.
        self._json_mode = True

    def __enter__(self) -> LLMClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def _openai(self) -> openai.OpenAI:
        if self._client is None:
            if not self.config.configured:
                raise LLMUnavailable(
                    "no LLM endpoint configured",
                    "set MEMCLI_LLM_BASE_URL (Ollama, llama.cpp, vLLM) or MEMCLI_LLM_API_KEY",
                )
            import openai  # lazy: ~1 s of import time, only for commands that call a model

            self._client = openai.OpenAI(
                base_url=self.config.endpoint,
                api_key=self.config.api_key or _PLACEHOLDER_KEY,
                timeout=self.config.timeout,
                max_retries=self.config.max_retries,
            )
        return self._client

    def complete_json(self, task: str, system: str, user: str, schema: type[M]) -> M:
        """Ask for one JSON object matching `schema` and return it validated.

        The schema's JSON Schema is appended to the system message: it tells the model the
        exact shape, and OpenAI's JSON mode refuses requests whose messages never say "JSON".
        Raises LLMUnavailable, LLMBadReply or LLMError (other refusals such as a bad key).
        """
        import pydantic  # already loaded by any caller that has a schema; kept off module import

        shape = json.dumps(schema.model_json_schema(), separators=(",", ":"))
        messages: list[dict[str, str]] = [
            {
                "role": "system",
                "content": f"{system}\n\nReply with only a JSON object matching this "
                f"JSON Schema, no prose:\n{shape}",
            },
            {"role": "user", "content": user},
        ]
        reason = ""
        raw: str | None = None
        for attempt in range(2):  # the first answer, then at most one repair turn
            raw = self._chat(task, messages)
            try:
                return schema.model_validate(extract_json_object(raw or ""))
            except ValueError as exc:  # pydantic.ValidationError is a ValueError too
                if isinstance(exc, pydantic.ValidationError):
                    reason = _validation_reason(exc)
                else:
                    reason = str(exc)
            if attempt == 0:
                messages = [
                    *messages,
                    {"role": "assistant", "content": raw or ""},
                    {
                        "role": "user",
                        "content": f"That reply was not usable ({reason}). Answer again with "
                        "only the corrected JSON object.",
                    },
                ]
        raise LLMBadReply(task, reason, raw)

    def _chat(self, task: str, messages: list[dict[str, str]]) -> str | None:
        """One chat completion; returns the reply text and reports its usage."""
        import openai

        client = self._openai()
        params: dict[str, Any] = {
            "model": self.config.model,
            "messages": messages,
            "temperature": 0,
        }
        started = time.perf_counter()
        try:
            if self._json_mode:
                try:
                    reply = client.chat.completions.create(
                        **params, response_format={"type": "json_object"}
                    )
                except openai.APIStatusError as exc:
                    if exc.status_code not in _REJECTS_JSON_MODE:
                        raise
                    # Older llama.cpp builds and some proxies reject JSON mode; the schema in
                    # the prompt and the tolerant parser still get a JSON object out.
                    reply = client.chat.completions.create(**params)
                    self._json_mode = False
            else:
                reply = client.chat.completions.create(**params)
        except ValueError as exc:
            # The server said application/json but sent something else.
            latency = (time.perf_counter() - started) * 1000
            self._report(task, messages, None, None, latency)
            raise LLMBadReply(task, f"server sent a body that is not JSON: {exc}", None) from exc
        except openai.OpenAIError as exc:
            raise self._translate(exc) from exc
        latency = (time.perf_counter() - started) * 1000

        if isinstance(reply, str):
            # The openai client hands back the text when the body is not JSON at all.
            self._report(task, messages, reply, None, latency)
            raise LLMBadReply(task, "server sent a body that is not a chat completion", reply)
        content, finish = _first_choice(reply)
        self._report(task, messages, content, getattr(reply, "usage", None), latency)
        if finish == "length" and content is not None:
            # A cut-off reply is almost never valid JSON; say why instead of "bad JSON".
            try:
                extract_json_object(content)
            except ValueError:
                raise LLMBadReply(
                    task, "reply was cut off at the server's max tokens", content
                ) from None
        return content

    def _report(
        self,
        task: str,
        messages: list[dict[str, str]],
        content: str | None,
        usage: Any,
        latency_ms: float,
    ) -> None:
        if self.on_usage is None:
            return
        reported_in = getattr(usage, "prompt_tokens", None)
        reported_out = getattr(usage, "completion_tokens", None)
        estimated = not (isinstance(reported_in, int) and isinstance(reported_out, int))
        if estimated:
            tokens_in = _estimate_tokens("".join(m["content"] for m in messages))
            tokens_out = _estimate_tokens(content or "")
        else:
            tokens_in, tokens_out = int(reported_in), int(reported_out)
        self.on_usage(
            task,
            Usage(
                model=self.config.model,
                tokens_in=tokens_in,
                tokens_out=tokens_out,
                cost_usd=self.config.cost(tokens_in, tokens_out),
                latency_ms=round(latency_ms, 1),
                estimated=estimated,
            ),
        )

    def _translate(self, exc: openai.OpenAIError) -> LLMError:
        import openai

        where = self.config.endpoint
        tries = f"{self.config.max_retries + 1} attempt(s)"
        if isinstance(exc, openai.APITimeoutError):
            return LLMUnavailable(
                f"LLM server at {where} did not answer within {self.config.timeout:g}s ({tries})",
                "check that it is running, or raise MEMCLI_LLM_TIMEOUT",
            )
        if isinstance(exc, openai.APIConnectionError):
            cause = exc.__cause__ or exc
            return LLMUnavailable(
                f"cannot reach LLM server at {where}: {cause} ({tries})",
                "is it running? check MEMCLI_LLM_BASE_URL",
            )
        if isinstance(exc, openai.APIStatusError):
            status, detail = exc.status_code, _server_message(exc)
            if status == 429 or status >= 500:
                return LLMUnavailable(
                    f"LLM server at {where} answered HTTP {status}: {detail} ({tries})",
                    "try again later",
                )
            if status in (401, 403):
                return LLMError(
                    f"LLM server at {where} refused the API key (HTTP {status})",
                    "check MEMCLI_LLM_API_KEY",
                )
            if status == 404:
                return LLMError(
                    f"LLM server at {where} has no model {self.config.model!r} (HTTP 404)",
                    "check MEMCLI_LLM_MODEL and MEMCLI_LLM_BASE_URL (usually ends in /v1)",
                )
            return LLMError(f"LLM server at {where} rejected the request (HTTP {status}): {detail}")
        return LLMError(f"LLM call failed: {exc}")


def _first_choice(reply: Any) -> tuple[str | None, str | None]:
    # The openai client builds replies without validation, so a sparse server reply can lack
    # fields entirely; read them defensively.
    choices = getattr(reply, "choices", None) or []
    if not choices:
        return None, None
    message = getattr(choices[0], "message", None)
    content = getattr(message, "content", None)
    if content is None:
        content = getattr(message, "refusal", None)
    return content, getattr(choices[0], "finish_reason", None)


def _server_message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])[:200]
        if isinstance(err, str):
            return err[:200]
    return str(exc.message)[:200]
