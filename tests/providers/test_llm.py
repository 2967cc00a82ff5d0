"""LLM client tests: the real `openai` client against the scripted HTTP stub on 127.0.0.1."""

from __future__ import annotations

import base64
import json
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pydantic import BaseModel

from memcli.errors import MemcliError
from memcli.providers.llm import (
    LLMBadReply,
    LLMBudgetExceeded,
    LLMClient,
    LLMConfig,
    LLMError,
    LLMUnavailable,
    TokenBudget,
    Usage,
    extract_json_object,
)
from tests.support.llmstub import LLMStub, stub_embedding
from tests.support.net import refused_port


class Fact(BaseModel):
    text: str
    importance: float


class Facts(BaseModel):
    facts: list[Fact]


GOOD = {"facts": [{"text": "Ana prefers tea", "importance": 0.7}]}


def make_client(
    stub: LLMStub, usages: list[tuple[str, Usage]] | None = None, **overrides: object
) -> LLMClient:
    config = LLMConfig(base_url=stub.base_url, model="test-model", max_retries=0)
    for key, value in overrides.items():
        setattr(config, key, value)
    sink = usages.append if usages is not None else None
    return LLMClient(config, on_usage=(lambda task, u: sink((task, u))) if sink else None)


def ask(client: LLMClient) -> Facts:
    return client.complete_json("consolidate", "Extract facts.", "Ana: I prefer tea.", Facts)


def test_valid_reply_is_parsed_into_the_schema(stub: LLMStub) -> None:
    stub.enqueue_json(GOOD)
    with make_client(stub) as client:
        result = ask(client)
    assert result == Facts(facts=[Fact(text="Ana prefers tea", importance=0.7)])
    assert stub.pending == 0


def test_request_carries_model_temperature_json_mode_and_schema(stub: LLMStub) -> None:
    stub.enqueue_json(GOOD)
    with make_client(stub) as client:
        ask(client)
    (body,) = stub.chat_requests
    assert body["model"] == "test-model"
    assert body["temperature"] == 0
    assert body["response_format"] == {"type": "json_object"}
    system, user = body["messages"]
    assert system["role"] == "system" and system["content"].startswith("Extract facts.")
    # The JSON Schema rides along so the model knows the shape (and OpenAI JSON mode sees "JSON").
    assert '"importance"' in system["content"] and "JSON" in system["content"]
    assert user == {"role": "user", "content": "Ana: I prefer tea."}


@pytest.mark.parametrize(
    "content",
    [
        "```json\n" + json.dumps(GOOD) + "\n```",
        "Sure! Here it is:\n```\n" + json.dumps(GOOD) + "\n```\nAnything else?",
        "Here you go: " + json.dumps(GOOD) + " Hope that helps {:}",
        "<think>maybe {facts}?</think>\n" + json.dumps(GOOD),
    ],
    ids=["json-fence", "bare-fence-with-chatter", "chatter", "think-block"],
)
def test_fenced_or_chatty_json_is_accepted(stub: LLMStub, content: str) -> None:
    stub.enqueue(content)
    with make_client(stub) as client:
        assert ask(client).facts[0].text == "Ana prefers tea"


def test_extract_json_object_rejects_non_objects() -> None:
    for text, reason in [("", "empty"), ("[1, 2]", "got list"), ("no json here", "not JSON")]:
        with pytest.raises(ValueError, match=reason):
            extract_json_object(text)


def test_malformed_reply_raises_bad_reply_after_one_repair_and_records_usage(
    stub: LLMStub,
) -> None:
    junk = '{"facts": [ {"text": "unterminated' + "x" * 600
    stub.enqueue(junk)
    stub.enqueue(junk)
    usages: list[tuple[str, Usage]] = []
    with make_client(stub, usages) as client, pytest.raises(LLMBadReply) as info:
        ask(client)
    err = info.value
    assert "JSON" in err.reason
    assert len(err.raw) == 500 and err.raw.startswith('{"facts"')
    assert isinstance(err, LLMError) and isinstance(err, MemcliError) and err.exit_code == 1
    # Both replies cost tokens, so both are reported.
    assert [task for task, _ in usages] == ["consolidate", "consolidate"]
    assert len(stub.chat_requests) == 2 and stub.pending == 0


def test_repair_turn_tells_the_model_what_was_wrong_and_can_succeed(stub: LLMStub) -> None:
    stub.enqueue_json({"facts": [{"text": "Ana prefers tea"}]})  # importance missing
    stub.enqueue_json(GOOD)
    with make_client(stub) as client:
        assert ask(client) == Facts.model_validate(GOOD)
    repair = stub.chat_requests[1]["messages"]
    assert [m["role"] for m in repair] == ["system", "user", "assistant", "user"]
    assert "facts.0.importance" in repair[3]["content"]


def test_schema_invalid_reply_raises_bad_reply_naming_the_field(stub: LLMStub) -> None:
    for _ in range(2):
        stub.enqueue_json({"facts": [{"text": "Ana prefers tea", "importance": "high"}]})
    with make_client(stub) as client, pytest.raises(LLMBadReply) as info:
        ask(client)
    assert "facts.0.importance" in info.value.reason
    assert "not usable" in str(info.value)


def test_non_json_body_raises_bad_reply(stub: LLMStub) -> None:
    stub.enqueue("", raw_body="<html>502 upstream</html>", content_type="text/html")
    with make_client(stub) as client, pytest.raises(LLMBadReply) as info:
        ask(client)
    assert "<html>" in info.value.raw
    assert len(stub.chat_requests) == 1  # a broken server is not asked to repair


def test_broken_json_body_raises_bad_reply_and_records_usage(stub: LLMStub) -> None:
    stub.enqueue("", raw_body='{"choices": [', content_type="application/json")
    usages: list[tuple[str, Usage]] = []
    with make_client(stub, usages) as client, pytest.raises(LLMBadReply, match="not JSON"):
        ask(client)
    assert len(usages) == 1 and usages[0][1].estimated


def test_cut_off_reply_says_so(stub: LLMStub) -> None:
    stub.enqueue('{"facts": [{"text": "Ana pre', finish_reason="length")
    with make_client(stub) as client, pytest.raises(LLMBadReply, match="cut off"):
        ask(client)


def test_slow_reply_times_out_as_unavailable_in_bounded_time(stub: LLMStub) -> None:
    # Replies 20x later than the timeout: a client that waited for them would take 20 s; the
    # bound leaves a loaded machine seconds of slack (2 attempts of 0.5 s + a retry pause).
    stub.enqueue_json(GOOD, delay=10.0)
    stub.enqueue_json(GOOD, delay=10.0)
    import openai  # noqa: F401 - before the clock: the client's first call imports it (seconds)

    started = time.monotonic()
    with (
        make_client(stub, timeout=0.5, max_retries=1) as client,
        pytest.raises(LLMUnavailable, match="did not answer within 0.5s"),
    ):
        ask(client)
    assert time.monotonic() - started < 8
    assert len(stub.chat_requests) == 2  # the openai client retried once, as configured


def test_connection_refused_is_unavailable() -> None:
    # Refused at once, not after the timeout: waiting for it twice would take 20 s.
    import openai  # noqa: F401 - before the clock: the client's first call imports it (seconds)

    with refused_port() as port:
        config = LLMConfig(base_url=f"http://127.0.0.1:{port}/v1", model="m", timeout=10,
                           max_retries=1)
        started = time.monotonic()
        with LLMClient(config) as client, pytest.raises(LLMUnavailable, match="cannot reach"):
            ask(client)
        assert time.monotonic() - started < 8


def test_server_error_after_retries_is_unavailable(stub: LLMStub) -> None:
    stub.enqueue("model is loading", status=500)
    stub.enqueue("model is loading", status=500)
    with (
        make_client(stub, max_retries=1) as client,
        pytest.raises(LLMUnavailable, match="HTTP 500: model is loading"),
    ):
        ask(client)
    assert stub.pending == 0


def test_empty_script_is_a_clear_500(stub: LLMStub) -> None:
    with make_client(stub) as client, pytest.raises(LLMUnavailable, match="no scripted reply"):
        ask(client)


def test_rejected_api_key_is_an_error_not_unavailability(stub: LLMStub) -> None:
    stub.enqueue("bad key", status=401)
    with make_client(stub) as client, pytest.raises(LLMError, match="API key") as info:
        ask(client)
    assert not isinstance(info.value, LLMUnavailable)


def test_response_format_rejected_with_400_falls_back_without_it(stub: LLMStub) -> None:
    stub.enqueue("response_format is not supported", status=400)
    stub.enqueue_json(GOOD)
    stub.enqueue_json(GOOD)
    with make_client(stub) as client:
        assert ask(client) == Facts.model_validate(GOOD)
        ask(client)  # the client remembers: no second 400 round trip
    first, retry, later = stub.chat_requests
    assert first["response_format"] == {"type": "json_object"}
    assert "response_format" not in retry and "response_format" not in later


def test_usage_callback_gets_tokens_and_cost(stub: LLMStub) -> None:
    stub.enqueue_json(GOOD, usage=(1200, 300))
    usages: list[tuple[str, Usage]] = []
    with make_client(stub, usages, price_in_per_mtok=0.15, price_out_per_mtok=0.60) as client:
        ask(client)
    ((task, usage),) = usages
    assert task == "consolidate"
    assert (usage.model, usage.tokens_in, usage.tokens_out) == ("test-model", 1200, 300)
    assert usage.cost_usd == pytest.approx((1200 * 0.15 + 300 * 0.60) / 1e6)
    assert usage.latency_ms >= 0 and usage.estimated is False


def test_usage_is_estimated_when_the_server_omits_it(stub: LLMStub) -> None:
    stub.enqueue_json(GOOD, usage=None)
    usages: list[tuple[str, Usage]] = []
    with make_client(stub, usages) as client:
        ask(client)
    ((_, usage),) = usages
    assert usage.estimated is True
    assert usage.tokens_out == (len(json.dumps(GOOD)) + 3) // 4
    assert usage.tokens_in > 0


def test_unconfigured_client_says_so_without_a_network_call() -> None:
    config = LLMConfig(base_url=None, model="gpt-4o-mini")
    assert not config.configured
    assert LLMConfig(base_url=None, model="m", api_key="sk-x").configured
    with pytest.raises(LLMUnavailable, match="no LLM endpoint configured"):
        ask(LLMClient(config))


def test_token_budget() -> None:
    budget = TokenBudget()
    budget.check("acme", 9_999, 10_000)
    budget.check("acme", 10**9, None)
    with pytest.raises(LLMBudgetExceeded, match="tenant 'acme': 10,000 of 10,000") as info:
        budget.check("acme", 10_000, 10_000)
    assert isinstance(info.value, LLMError) and info.value.hint


def test_stub_embeddings_through_the_openai_client(stub: LLMStub) -> None:
    import openai

    client = openai.OpenAI(base_url=stub.base_url, api_key="x", max_retries=0)
    try:
        reply = client.embeddings.create(model="e", input=["tea with milk", "milk tea"])
        b64 = client.embeddings.create(model="e", input="tea", encoding_format="base64")
    finally:
        client.close()
    a, b = (d.embedding for d in reply.data)
    assert len(a) == stub.embedding_dim
    # The openai client may ask for base64 float32 and decode it: equal to float32 precision.
    assert a == pytest.approx(stub_embedding("tea with milk", 64), abs=1e-6)
    assert sum(x * y for x, y in zip(a, b, strict=True)) > 0.5  # shared words -> similar
    # Asked for explicitly, base64 comes back undecoded: little-endian float32.
    raw = base64.b64decode(b64.data[0].embedding)
    assert list(struct.unpack("<64f", raw)) == stub_embedding("tea", 64)
    assert len(stub.embedding_requests) == 2


def test_importing_the_module_does_not_import_openai() -> None:
    code = "import sys, memcli.providers.llm; sys.exit('openai' in sys.modules)"
    root = Path(__file__).resolve().parents[2]
    assert subprocess.run([sys.executable, "-c", code], cwd=root).returncode == 0
