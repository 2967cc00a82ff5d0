"""The rule sets behind redaction: gitleaks' rules read as data, credentials said in a sentence,
a repeated label, and numbers proven by their check digits (IBAN, national ids)."""

from __future__ import annotations

import re
import warnings

import pytest
import regex
from stdnum import iban as stdnum_iban

from memcli.policy import gitleaks
from memcli.policy.redaction import redact_record
from memcli.policy.secrets import redact


def _kinds(text: str) -> tuple[str, ...]:
    return redact(text).kinds


# -- gitleaks' rules ---------------------------------------------------------------------------
def test_every_gitleaks_rule_with_a_regex_compiles_and_runs():
    rules, common = gitleaks.rules()
    data = gitleaks.tomllib.loads(gitleaks.RULES_FILE.read_text())
    wanted = {r["id"] for r in data["rules"] if "regex" in r} - set(gitleaks.SKIPPED)
    assert {r.kind for r in rules} == {w.replace("-", "_") for w in wanted}
    assert len(rules) >= 200 and common
    for rule in rules:
        assert rule.keywords, rule.kind  # the prefilter wakes every rule by a keyword
        rule.pattern.search("nothing to see here")  # compiles (RE2 syntax, read by `regex`)


def test_python_re_would_misread_some_rules():
    """Why the rules go through `regex`: `re` rejects RE2's scoped flags and `\\z`."""
    data = gitleaks.tomllib.loads(gitleaks.RULES_FILE.read_text())
    refused = 0
    for rule in data["rules"]:
        if "regex" in rule:
            regex.compile(rule["regex"])
            try:
                with warnings.catch_warnings():  # `[[:alnum:]]`: "possible nested set"
                    warnings.simplefilter("ignore", FutureWarning)
                    re.compile(rule["regex"])
            except re.error:
                refused += 1
    assert refused > 0


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("push with glpat-Xy7kP2mQ9rTs4vWz6bNa now", "gitlab_pat"),
        ("pull with 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.", "huggingface_access_token"),
        ("publish with npm_k3J9x2LmQ8r5Tz1WvB7nY4cH6dP0sF2gA9eK, then tag", "npm_access_token"),
        ("doctl auth init -t dop_v1_" + "3f9a0c7e1b5d2468" * 4, "digitalocean_pat"),
        ("store token shpat_" + "0a1b2c3d4e5f6789" * 2 + ".", "shopify_access_token"),
        ("DATABRICKS_TOKEN is dapi" + "9f8e7d6c5b4a3921" * 2, "databricks_api_token"),
        ("twilio key SK" + "4c3b2a19e8f7d6c5" * 2 + " for SMS", "twilio_api_key"),
        ("post to https://hooks.slack.com/services/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",
         "slack_webhook_url"),
    ],
)
def test_gitleaks_rules_find_token_shapes_in_sentences(text: str, kind: str):
    """Sentence punctuation after a token ends it (gitleaks alone ends one at a blank or
    a quote), and the kind is the rule's id."""
    assert kind in _kinds(text)


def test_gitleaks_allowlists_and_entropy_keep_placeholders():
    # the global stop word, and a rule's entropy floor
    assert not _kinds("hf_abcdefghijklmnopqrstuvwxyzABCDEFGH")
    assert not _kinds("glpat-aaaaaaaaaaaaaaaaaaaa")


# -- memcli's own shapes, where gitleaks needs a label ---------------------------------------
@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("mailgun key-3ax6xnjp29jd6fds4gc373sgvjxteol0 for receipts", "mailgun_key"),
        ("the bot: 123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsawz.", "telegram_bot_token"),
        ("client secret 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", "google_oauth_secret"),
        ("the other half is wJalrXUtnFEMI/K7MDENG/bPxRfiCYzq3Lw9sT2A", "aws_secret_access_key"),
        ('{"private_key_id": "3f2a9c4e5b6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f"}', "secret"),
        ("AccountName=a;AccountKey=Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MA==;EndpointSuffix=x", "secret"),
    ],
)
def test_own_shapes(text: str, kind: str):
    assert kind in _kinds(text)


def test_a_git_sha_and_a_long_word_are_not_a_bare_aws_secret():
    assert not _kinds("fixed in 9fceb02d0ae598e95dc970b74767f19372d61af8 yesterday")
    assert not _kinds("Pneumonoultramicroscopicsilicovolcanoconiosis is a word")


# -- credentials in a sentence ---------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "left", "kind"),
    [
        ("my PIN is 4821", "my PIN is [REDACTED:pin]", "pin"),
        ("the wifi password is Tulip7Garden", "the wifi password is [REDACTED:password]",
         "password"),
        ("The password for the router is hunter22.", "The password for the router is "
         "[REDACTED:password].", "password"),
        ("my passphrase is 'correct horse battery staple'",
         "my passphrase is '[REDACTED:password]'", "password"),
        ("the door code is 12-34-56 now", "the door code is [REDACTED:pin] now", "pin"),
        ("my weather api key is 9f8e7d6c5b4a39281706f5e4d3c2b1a0",
         "my weather api key is [REDACTED:api_key]", "api_key"),
        ("Password: sunshine", "Password: [REDACTED:password]", "password"),
    ],
)
def test_a_credential_said_in_a_sentence_is_redacted(text: str, left: str, kind: str):
    result = redact(text)
    assert result.text == left
    assert kind in result.kinds


@pytest.mark.parametrize(
    "text",
    [
        "password: password: Orchid5Lake",
        "Password: password: password = Orchid5Lake",
        "the wifi password is: password: Orchid5Lake",
        "my PIN is PIN: 4821",
    ],
)
def test_a_repeated_label_never_uncovers_the_value(text: str):
    result = redact(text)
    assert "Orchid5Lake" not in result.text and "4821" not in result.text, result.text
    assert redact(result.text) == type(result)(result.text, ())  # idempotent


@pytest.mark.parametrize(
    "text",
    [
        "The password is incorrect.",
        "the key is patience, and the secret is time",
        "the zip code is 94110",
        "a pin-point answer; a password-protected file; what is the password?",
        "The code is ready for review and the token: a unit of text",
        "my password is the same as before",
        "I passed the exam, the key to it was 3 hours of sleep",
    ],
)
def test_prose_about_credentials_survives(text: str):
    assert redact(text).text == text


# -- numbers proven by their check digits ------------------------------------------------------
def test_an_iban_is_redacted_only_when_mod_97_holds():
    good = "GB82 WEST 1234 5698 7654 32"
    assert stdnum_iban.is_valid(good)
    assert redact(f"my IBAN is {good}, thanks").text == "my IBAN is [REDACTED:iban], thanks"
    assert redact("compact DE89370400440532013000 too").kinds == ("iban",)
    bad = "GB83 WEST 1234 5698 7654 32"  # one check digit off
    assert redact(f"my IBAN is {bad}").text == f"my IBAN is {bad}"


@pytest.mark.parametrize(
    ("valid", "invalid"),
    [
        ("SSN 536-22-1234", "SSN 666-22-1234"),  # area 666 is never issued
        ("DNI 12345678Z", "DNI 12345678A"),
        ("CPF 390.533.447-05", "CPF 390.533.447-06"),
        ("Aadhaar 2345 6789 0124", "Aadhaar 2345 6789 0123"),
        ("personnummer 811218-9876", "personnummer 811218-9875"),
    ],
)
def test_national_ids_go_only_when_their_check_digits_hold(valid: str, invalid: str):
    assert redact(valid).kinds == ("national_id",), valid
    assert redact(invalid).text == invalid


def test_records_redact_the_new_kinds_in_keys_and_values():
    value, found = redact_record({"note": "my PIN is 4821", "GB82 WEST 1234 5698 7654 32": 1})
    assert value == {"note": "my PIN is [REDACTED:pin]", "[REDACTED:iban]": 1}
    assert {f.kind for f in found} == {"pin", "iban"}
