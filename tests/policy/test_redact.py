"""Tests for memcli.policy.secrets: every detector on real-looking secrets, false positives,
positions,
idempotency, JSON walking, and hypothesis properties (never raises, never leaks)."""

from __future__ import annotations

import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memcli.policy.redaction import redact_record
from memcli.policy.secrets import Finding, Redaction, is_secret_key, redact

# Published example credentials (AWS docs, jwt.io) and made-up ones in the real formats.
AWS_KEY_ID = "AKIAIOSFODNN7EXAMPLE"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"
    ".eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ"
    ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
OPENAI = "sk-proj-4fJ9kQ2mXz7Lp0aB3cD8eF1gH6iJ5kL2mN9oP4qR"
OPENAI_LEGACY = "sk-T3BlbkFJ8yZq2Xw5Vb7Nm1Kc4Lp9Rt6Sd3Fg0Hj2"
ANTHROPIC = "sk-ant-api03-Zq8Xw5Vb7Nm1Kc4Lp9Rt6Sd3Fg0Hj2Qa-bC_dEfGh"
GITHUB = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"
GITHUB_PAT = "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz0123456789ABCDEF"
SLACK = "xoxb-2401928374-1029384756-q8Xw5Vb7Nm1Kc4Lp"
GOOGLE = "AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY"
STRIPE = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"
STRIPE_RK = "rk_live_51Hq8Xw5Vb7Nm1Kc4Lp9Rt6S"
PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\n"
    "VTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u+qKhbwKfBstIs+bMY2Zkp18gnTxK\n"
    "-----END RSA PRIVATE KEY-----"
)


def spans(text: str) -> list[tuple[str, str]]:
    """(kind, original substring) for each finding."""
    return [(f.kind, text[f.start : f.end]) for f in redact(text).findings]


@pytest.mark.parametrize(
    ("text", "secret", "kind"),
    [
        (f"export OPENAI_API_KEY_VALUE {OPENAI} now", OPENAI, "openai_key"),
        (f"old key {OPENAI_LEGACY}.", OPENAI_LEGACY, "openai_key"),
        (f"claude uses {ANTHROPIC}", ANTHROPIC, "anthropic_key"),
        (f"git clone https://{GITHUB}@github.com/o/r", GITHUB, "github_token"),
        (f"pat: {GITHUB_PAT}", GITHUB_PAT, "github_token"),
        (f"SLACK={SLACK}", SLACK, "slack_token"),
        (f"maps key ({GOOGLE})", GOOGLE, "google_api_key"),
        (f"stripe {STRIPE} charge", STRIPE, "stripe_key"),
        (f"restricted {STRIPE_RK}", STRIPE_RK, "stripe_key"),
        (f"id={AWS_KEY_ID}", AWS_KEY_ID, "aws_access_key_id"),
        ("creds ASIAY34FZKBOKMUTVV7A here", "ASIAY34FZKBOKMUTVV7A", "aws_access_key_id"),
        (f"aws_secret_access_key = {AWS_SECRET}", AWS_SECRET, "aws_secret_access_key"),
        (f'"AWS_SECRET_ACCESS_KEY": "{AWS_SECRET}"', AWS_SECRET, "aws_secret_access_key"),
        (f"session {JWT} expired", JWT, "jwt"),
        (f"{PEM}\nthat was the key", PEM, "private_key"),
    ],
)
def test_detects_token_formats(text: str, secret: str, kind: str) -> None:
    result = redact(text)
    assert secret not in result.text
    assert f"[REDACTED:{kind}]" in result.text
    assert (kind, secret) in spans(text)


def luhn(number: str) -> bool:
    digits = [int(c) for c in number if c.isdigit()]
    total = 0
    for i, d in enumerate(reversed(digits)):
        doubled = d * (1 + i % 2)
        total += doubled // 10 + doubled % 10
    return total % 10 == 0


@pytest.mark.parametrize(
    ("text", "card"),
    [
        ("paid with 4111 1111 1111 1111, exp 05/27", "4111 1111 1111 1111"),
        ("card: 5500-0000-0000-0004.", "5500-0000-0000-0004"),
        ("amex 3782 822463 10005 on file", "3782 822463 10005"),
        ("raw 4111111111111111 in a log", "4111111111111111"),
        ('{"pan":"6011000990139424"}', "6011000990139424"),
        ("19 digits 4111 1111 1111 1111 003", "4111 1111 1111 1111 003"),
        ("call me at 12, card 4111 1111 1111 1111 2024", "4111 1111 1111 1111"),
    ],
)
def test_card_numbers_that_pass_luhn_are_redacted(text: str, card: str) -> None:
    assert luhn(card)
    assert spans(text) == [("card_number", card)]
    assert "[REDACTED:card_number]" in redact(text).text


@pytest.mark.parametrize(
    "text",
    [
        "order 4111111111111112 shipped",  # 16 digits, fails Luhn
        "order no. 5500-0000-0000-0005",
        "invoice 3782 822463 10006",
        "tracking 9400111899223197428490",  # too long, and starts with 9
        "at 1718035200000 ms",  # epoch milliseconds start with 1
        "call +44 20 7946 0958 or 555-0100",
        "mixed 4111-1111 1111 1111 separators",
        "hex 0x4111111111111111 and id a4111111111111111b",
        "ISBN 978-3-16-148410-0, year 2024-05-01",
    ],
)
def test_numbers_that_are_not_cards_survive(text: str) -> None:
    assert redact(text) == Redaction(text, ())


def test_bearer_and_authorization_headers_keep_the_scheme() -> None:
    text = "curl -H 'Authorization: Bearer Zx81kk29aaQ7.pL_3-x' https://api.example.com"
    assert redact(text).text == (
        "curl -H 'Authorization: Bearer [REDACTED:bearer_token]' https://api.example.com"
    )
    basic = "Authorization: Basic dXNlcjpwYXNzd29yZA=="
    assert redact(basic).text == "Authorization: Basic [REDACTED:authorization]"
    digest = 'Authorization: Digest username="bob", response="6629fae49393a053"\nnext line'
    assert redact(digest).text == "Authorization: Digest [REDACTED:authorization]\nnext line"
    headers = '{"authorization": "token 0123456789abcdef0123"}'
    assert "0123456789abcdef0123" not in redact(headers).text


def test_url_password_keeps_user_and_host() -> None:
    text = "DATABASE_URL=postgres://admin:s3cr3t-P4ss@db.internal:5432/app?sslmode=require"
    assert redact(text).text == (
        "DATABASE_URL=postgres://admin:[REDACTED:url_password]@db.internal:5432/app?sslmode=require"
    )
    # A password containing '@' (not percent-encoded, as people do write it).
    assert spans("redis://:p@ss@cache:6379/0") == [("url_password", "p@ss")]


@pytest.mark.parametrize(
    ("text", "expected", "kind"),
    [
        ("password=hunter2", "password=[REDACTED:password]", "password"),
        ("DB_PASSWORD='correct horse'", "DB_PASSWORD='[REDACTED:password]'", "password"),
        ('passwd: "pa ss"', 'passwd: "[REDACTED:password]"', "password"),
        ("password: hunter2", "password: [REDACTED:password]", "password"),
        ('{"api_key": "abc123"}', '{"api_key": "[REDACTED:api_key]"}', "api_key"),
        ("GET /v1?api-key=ZZ9plural&x=1", "GET /v1?api-key=[REDACTED:api_key]&x=1", "api_key"),
        ("client_secret = 'q9w8e7'", "client_secret = '[REDACTED:secret]'", "secret"),
        ("SECRET_KEY=django-insecure-x1", "SECRET_KEY=[REDACTED:secret]", "secret"),
        ("token=abc.def", "token=[REDACTED:token]", "token"),
        ("access_token: ya29.a0AfH6SM", "access_token: [REDACTED:token]", "token"),
        ("if password == 'hunter2':", "if password == '[REDACTED:password]':", "password"),
        ("{password=hunter2}", "{password=[REDACTED:password]}", "password"),
    ],
)
def test_assignments_redact_only_the_value(text: str, expected: str, kind: str) -> None:
    result = redact(text)
    assert result.text == expected
    assert [f.kind for f in result.findings] == [kind]


def test_private_spans() -> None:
    text = "keep <private>my PIN is\n4321</private> keep <PRIVATE>gone</Private> end"
    result = redact(text)
    assert result.text == "keep [REDACTED:private] keep [REDACTED:private] end"
    assert [text[f.start : f.end] for f in result.findings] == [
        "<private>my PIN is\n4321</private>",
        "<PRIVATE>gone</Private>",
    ]
    # An unclosed tag hides everything after it: better too much than a leak.
    assert redact("a <private>b\nc").text == "a [REDACTED:private]"


@pytest.mark.parametrize(
    "text",
    [
        "We met at the café and talked about the project timeline for an hour.",
        "The bearer of bad news. Token: a unit of text. Authorization: required.",
        "The password is stored in the vault; the secret to good bread is time.",
        "request id 123e4567-e89b-12d3-a456-426614174000 failed",
        "fixed in 9fceb02d0ae598e95dc970b74767f19372d61af8 and 3a4b5c6",
        "see https://example.com/path?query=1#frag and http://localhost:8080/x",
        "ssh://git@github.com/org/repo.git and user@example.com",
        "pwd: /home/user; PWD=/tmp; max_tokens=512; tokens: 5; key: value",
        "export GITHUB_TOKEN=$GH_TOKEN; password=<your-password>; secret=${SECRET}",
        "sk-learn is not a key, nor is task-abcdefghijklmnopqrstuvwxyz",
        "AKIA alone, AKIAshort, and ASIA travel",
        "",
    ],
)
def test_no_false_positives(text: str) -> None:
    result = redact(text)
    assert result == Redaction(text, ())


def test_positions_refer_to_the_original_and_rebuild_the_output() -> None:
    text = f"a {GITHUB} b password=hunter2 c {JWT} d"
    result = redact(text)
    assert [f.start for f in result.findings] == sorted(f.start for f in result.findings)
    rebuilt, pos = [], 0
    for f in result.findings:
        rebuilt += [text[pos : f.start], f"[REDACTED:{f.kind}]"]
        pos = f.end
    rebuilt.append(text[pos:])
    assert "".join(rebuilt) == result.text
    assert result.kinds == ("github_token", "password", "jwt")


def test_findings_never_hold_the_secret() -> None:
    result = redact(f"key {ANTHROPIC}")
    assert ANTHROPIC not in repr(result.findings)
    assert result.findings == (Finding("anthropic_key", 4, 4 + len(ANTHROPIC)),)


def test_overlapping_detectors_merge_into_one_marker() -> None:
    text = f"Authorization: Bearer {JWT}"
    result = redact(text)
    assert result.text.count("[REDACTED:") == 1
    assert JWT not in result.text


ALL_EXAMPLES = [
    f"{OPENAI} {ANTHROPIC} {GITHUB} {SLACK} {GOOGLE} {STRIPE} {AWS_KEY_ID}",
    f"aws_secret_access_key={AWS_SECRET} Authorization: Bearer {JWT}",
    f"{PEM} <private>x</private> <private>open",
    "postgres://u:pw@h/db password=hunter2 token: 'abc' api_key=\"k\" secret:Zx81kk29aa",
    "Authorization: Digest a=b, c=d",
    "card 4111 1111 1111 1111 1111 and 5500-0000-0000-0004-5500-0000-0000-0004",
]


@pytest.mark.parametrize("text", ALL_EXAMPLES)
def test_redact_is_idempotent(text: str) -> None:
    once = redact(text)
    assert once.findings
    assert redact(once.text) == Redaction(once.text, ())


def test_is_secret_key() -> None:
    for name in ("password", "DB_PASSWORD", "api_key", "apiKey", "GITHUB_TOKEN", "client_secret"):
        assert is_secret_key(name), name
    for name in ("max_tokens", "token_count", "tokenizer", "keyword", "passage", "secretary"):
        assert not is_secret_key(name), name


def test_redact_record_walks_values_and_uses_key_names() -> None:
    payload = {
        "text": f"deploy with {GITHUB}",
        "env": {"DB_PASSWORD": "hunter2", "EMPTY_TOKEN": "", "HOME": "/root"},
        "items": [1, None, True, ("x", f"jwt {JWT}")],
        "max_tokens": 512,
    }
    original = repr(payload)
    value, findings = redact_record(payload)
    assert repr(payload) == original  # input untouched
    assert value == {
        "text": "deploy with [REDACTED:github_token]",
        "env": {"DB_PASSWORD": "[REDACTED:password]", "EMPTY_TOKEN": "", "HOME": "/root"},
        "items": [1, None, True, ("x", "jwt [REDACTED:jwt]")],
        "max_tokens": 512,
    }
    assert [(f.kind, f.path) for f in findings] == [
        ("github_token", ("text",)),
        ("password", ("env", "DB_PASSWORD")),
        ("jwt", ("items", 3, 1)),
    ]
    assert redact_record(value) == (value, ())


def test_redact_record_lists_inherit_the_key_and_numeric_passwords_go() -> None:
    value, findings = redact_record(
        {"tokens": ["x", "y"], "PASSWORD": 123456, "max_token": 512, "secret": False}
    )
    assert value == {
        "tokens": ["x", "y"],  # "tokens" is not a secret key name
        "PASSWORD": "[REDACTED:password]",
        "max_token": 512,
        "secret": False,
    }
    assert [f.path for f in findings] == [("PASSWORD",)]
    value, _ = redact_record({"api_key": ["k1", "k2"]})
    assert value == {"api_key": ["[REDACTED:api_key]", "[REDACTED:api_key]"]}


def test_redact_record_scalars() -> None:
    assert redact_record(None) == (None, ())
    assert redact_record(3.5) == (3.5, ())
    assert redact_record("password=x")[0] == "password=[REDACTED:password]"


# --- properties ----------------------------------------------------------------------------------

_ALNUM = string.ascii_letters + string.digits


def _body(size: int) -> st.SearchStrategy[str]:
    # A digit and an upper-case letter are forced in, as real keys have them.
    return st.text(_ALNUM, min_size=size, max_size=size + 12).map(lambda s: s + "7Q")


def _card(digits: str) -> str:
    """`digits` completed by the Luhn check digit."""
    return digits + next(c for c in string.digits if luhn(digits + c))


SECRETS = st.one_of(
    _body(30).map(lambda b: "sk-proj-" + b),
    _body(30).map(lambda b: "sk-ant-api03-" + b),
    _body(36).map(lambda b: "ghp_" + b),
    _body(60).map(lambda b: "github_pat_" + b),
    _body(20).map(lambda b: "xoxp-" + b),
    _body(35).map(lambda b: "AIza" + b),
    _body(24).map(lambda b: "sk_live_" + b),
    st.text(string.ascii_uppercase + string.digits, min_size=16, max_size=16).map(
        lambda b: "AKIA" + b
    ),
    st.tuples(_body(10), _body(20), _body(20)).map(lambda p: f"eyJ{p[0]}.{p[1]}.{p[2]}"),
    st.text(string.digits, min_size=14, max_size=14).map(lambda d: _card("4" + d)),
)
WRAPPERS = st.sampled_from(
    ["{}", "key {} end", "password={}", '"token": "{}"', "Bearer {}", "({})", "`{}`", "x\n{}\n"]
)


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=200))
def test_redact_never_raises_and_is_idempotent_on_any_text(text: str) -> None:
    once = redact(text)
    assert redact(once.text).text == once.text
    for f in once.findings:
        assert 0 <= f.start < f.end <= len(text)


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=40), SECRETS, WRAPPERS, st.text(max_size=40))
def test_embedded_secret_never_survives(before: str, secret: str, wrapper: str, after: str) -> None:
    text = before + " " + wrapper.format(secret) + " " + after
    result = redact(text)
    assert secret not in result.text
    assert redact(result.text).text == result.text


FRAGMENTS = st.sampled_from(
    [
        "password", "token", "secret", "api_key", "=", ":", "==", '"', "'", " ", "\n", "{", "}",
        "Bearer ", "Authorization: ", "Digest ", "<private>", "</private>", "://", "u:", "@h",
        "/", "sk-", "a1B2c3D4e5F6g7H8i9J0k", "[REDACTED:token]", "$X", "hunter2", ",",
        "4111", "1111", "-", "5500", "0004", "378282246310005", "7",
    ]
)  # fmt: skip


@settings(max_examples=120, deadline=None)
@given(st.lists(FRAGMENTS, max_size=12).map("".join))
def test_redact_is_idempotent_on_secret_like_text(text: str) -> None:
    once = redact(text)
    assert redact(once.text).text == once.text
