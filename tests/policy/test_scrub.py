"""The record walker behind every write (memcli.policy.redaction): keys, nesting, idempotency,
non-strings."""

from __future__ import annotations

import copy
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from memcli.core.records import EventIn
from memcli.policy.redaction import redact_event, redact_fields, redact_record, redact_text

KEY = "sk-proj-Abc123Def456Ghi789Jkl012Mno"
GH = "ghp_" + "a1B2c3D4e5" * 4
OPENAI = "[REDACTED:openai_key]"
GITHUB = "[REDACTED:github_token]"


def test_keys_are_redacted_at_any_depth_and_paths_never_hold_the_secret() -> None:
    value, findings = redact_record(
        {"outer": [{KEY: {"note": f"also {GH}"}}], f"password={GH[:12]}": 1}
    )
    assert value == {
        "outer": [{OPENAI: {"note": f"also {GITHUB}"}}],
        "password=[REDACTED:password]": 1,
    }
    assert [(f.kind, f.path) for f in findings] == [
        ("openai_key", ("outer", 0, OPENAI)),
        ("github_token", ("outer", 0, OPENAI, "note")),
        ("password", ("password=[REDACTED:password]",)),
    ]
    assert KEY not in repr(findings) and GH not in repr(findings)


def test_keys_that_redact_alike_are_kept_apart() -> None:
    other = KEY.replace("Abc", "Xyz")
    value, findings = redact_record({KEY: "first", other: "second", f"{OPENAI}#2": "taken"})
    assert value == {OPENAI: "first", f"{OPENAI}#3": "second", f"{OPENAI}#2": "taken"}
    assert len(findings) == 2
    # A key already named like the marker keeps its name; the redacted one moves aside.
    value, _ = redact_record({KEY: "secret's", OPENAI: "literal"})
    assert value == {f"{OPENAI}#2": "secret's", OPENAI: "literal"}


def test_non_strings_pass_through_and_numeric_passwords_go() -> None:
    record = {"n": 3, "f": 2.5, "b": True, "none": None, "max_tokens": 512, "pin_password": 1234,
              "list": [1, 2.0, False, None]}
    value, findings = redact_record(record)
    assert value == {**record, "pin_password": "[REDACTED:password]"}
    assert [f.path for f in findings] == [("pin_password",)]


def test_markers_are_not_redacted_again() -> None:
    record = {OPENAI: "password=[REDACTED:password]", "api_key": "[REDACTED:api_key]",
              "t": [f"{GITHUB} and {OPENAI}"]}
    assert redact_record(record) == (record, ())


def test_the_input_is_not_modified_and_tuples_stay_tuples() -> None:
    record = {"a": [KEY, (GH, 1)], KEY: {"b": KEY}}
    before = copy.deepcopy(record)
    value, _ = redact_record(record)
    assert record == before
    assert value == {"a": [OPENAI, (GITHUB, 1)], OPENAI: {"b": OPENAI}}


SECRETS = st.sampled_from([KEY, GH, "password=hunter2x9", "Bearer abcDEF123456789xyz",
                           "postgres://u:pw123456@db.example.com/x", "AKIAIOSFODNN7EXAMPLE"])
TEXT = st.one_of(st.text(max_size=20), SECRETS, st.tuples(st.text(max_size=8), SECRETS).map(
    lambda t: f"{t[0]} {t[1]}"))
JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), TEXT),
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(TEXT, inner, max_size=4)),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(JSON)
def test_idempotent_and_no_planted_secret_survives(value) -> None:
    once, _ = redact_record(value)
    assert redact_record(once) == (once, ())
    dumped = json.dumps(once, ensure_ascii=False)
    for secret in (KEY, GH, "hunter2x9", "abcDEF123456789xyz", "pw123456", "AKIAIOSFODNN7EXAMPLE"):
        assert secret not in dumped


def test_redact_event_covers_every_text_field_but_leaves_ids_alone() -> None:
    rec = EventIn.model_validate({
        "event_id": "e1", "session_id": "s1", "user_id": "u1", "actor": {"type": "user", "id": "a"},
        "text": f"use {KEY}", "tags": [GH, "plain"], "refs": [GH, {"url": KEY, KEY: [GH]}],
        "category": f"token={GH}", "content": {KEY: 1},
    })
    clean, kinds = redact_event(rec)
    assert kinds == ["github_token", "openai_key"]
    assert clean.content == {"text": f"use {OPENAI}", OPENAI: 1}
    assert clean.tags == [GITHUB, "plain"]
    assert clean.refs == [GITHUB, {"url": OPENAI, OPENAI: [GITHUB]}]
    assert clean.category == f"token={GITHUB}"
    assert (clean.event_id, clean.session_id, clean.user_id, clean.actor.id) == (
        "e1", "s1", "u1", "a")
    assert rec.tags == [GH, "plain"]  # the original record is untouched
    same, none = redact_event(clean)
    assert same is clean and none == []


def test_redact_fields_and_text() -> None:
    row, kinds = redact_fields({"title": KEY, "user_id": KEY, "refs": [GH]}, ("title", "refs"))
    assert row == {"title": OPENAI, "user_id": KEY, "refs": [GITHUB]}
    assert kinds == ["github_token", "openai_key"]
    assert redact_text(f"a {KEY}") == (f"a {OPENAI}", ["openai_key"])


def test_a_sealed_value_is_ciphertext_and_left_as_it_is():
    """A `high` value sealed by memcli.policy.encryption is base64 ciphertext, in which a run of
    the AWS key alphabet occurs by chance: an import redacts its records, and must not change a
    byte of it (the value would no longer decrypt). The same run outside a seal is redacted."""
    run = "JmyMGoTabZUQcve8zzdCZuxa849JKOe9ilhYjLp3"  # 40 characters, as a ciphertext held
    sealed = f"enc:v1:8c8f2800a26c:{run}"
    assert redact_record({"content": sealed}) == ({"content": sealed}, ())
    clean, found = redact_record({"content": f"the other half is {run}"})
    assert run not in clean["content"] and found
