"""A corpus of credential kinds, real-shaped but fake, each in the sentence or line that carries it.

Used by the corpus test (tests/policy/test_secrets_corpus.py: every kind through every write entry)
and by the redaction bench (bench/secrets.py: kinds caught, cost). The values are made when the
corpus is built, from a seeded generator, so this file holds no secret-shaped literal (a secret
scanner run over the repository finds nothing here) and two corpora of different seeds share no
value.

Each entry is a template: `«...»` marks the secret; inside it `{x:N}` is N random characters of
alphabet `x` (see `ALPHABETS`). Shapes follow gitleaks' rules (their regexes and their test
cases in cmd/generate/config/rules) and the formats the services document; numbers with check
digits are computed with python-stdnum, so they are valid.
"""

from __future__ import annotations

import random
import re
import string
from collections.abc import Callable
from dataclasses import dataclass

from stdnum import iban, luhn, verhoeff
from stdnum.br import cpf
from stdnum.fr import nir
from stdnum.it import codicefiscale

__all__ = ["Planted", "corpus", "TEMPLATES"]

ALPHABETS = {
    "h": "0123456789abcdef",
    "a": string.ascii_letters + string.digits,
    "l": string.ascii_lowercase + string.digits,
    "U": string.ascii_uppercase + string.digits,
    "L": string.ascii_letters,
    "d": string.digits,
    "b": string.ascii_letters + string.digits + "+/",
    "w": string.ascii_letters + string.digits + "_-",
    "A": string.ascii_uppercase + "234567",
    "e": "qpzry9x8gf2tvdw0s3jn54khce6mua7l".upper(),  # bech32, as age keys
    "x": string.ascii_lowercase,
}

PEM = "-----BEGIN RSA PRIVATE KEY-----\n{b:64}\n{b:64}\n{b:40}\n-----END RSA PRIVATE KEY-----"

# kind -> template. Kinds are the corpus's names, not the kinds redaction reports.
TEMPLATES: dict[str, str] = {
    "gitlab_pat": "CI pushes with «glpat-{w:20}» now.",
    "huggingface_token": "the model pull uses «hf_{L:34}», ok",
    "npm_token": "//registry.npmjs.org/:_authToken=«npm_{a:36}»",
    "pypi_token": "twine upload with password «pypi-AgEIcHlwaS5vcmc{w:70}»",
    "sendgrid_key": "mail goes out with «SG.{w:22}.{w:43}».",
    "twilio_key": "twilio SID key «SK{h:32}» for SMS",
    "digitalocean_pat": "doctl auth init -t «dop_v1_{h:64}»",
    "shopify_token": "store admin token «shpat_{h:32}».",
    "databricks_token": "DATABRICKS_TOKEN is «dapi{h:32}»",
    "slack_webhook": "alerts post to «https://hooks.slack.com/services/T{U:8}/B{U:8}/{a:24}»",
    "github_pat": "git clone https://«ghp_{a:36}»@github.com/org/repo",
    "github_fine_grained_pat": "token «github_pat_{a:22}_{a:59}» for the bot",
    "github_oauth": "oauth token «gho_{a:36}».",
    "github_app_token": "GITHUB_TOKEN=«ghs_{a:36}»",
    "slack_bot_token": "bot token «xoxb-{d:12}-{d:12}-{a:24}»",
    "stripe_key": "payments use «sk_live_{a:24}».",
    "openai_key": "OPENAI_API_KEY=«sk-proj-{w:48}»",
    "anthropic_key": "claude key «sk-ant-api03-{w:93}AA»",
    "aws_access_key_id": "the access key id is «AKIA{A:16}».",
    "gcp_api_key": "maps key «AIza{w:35}»",
    "jwt": "session «eyJ{a:20}.eyJ{a:30}.{w:30}» expires",
    "private_key": "deploy key:\n«" + PEM + "»",
    "age_key": "backup key «AGE-SECRET-KEY-1{e:58}»",
    "onepassword_secret_key": "1Password secret key «A3-{U:6}-{U:11}-{U:5}-{U:5}-{U:5}»",
    "alibaba_key_id": "aliyun id «LTAI{l:20}»",
    "clojars_token": "deploy «CLOJARS_{l:60}»",
    "doppler_token": "DOPPLER_TOKEN=«dp.pt.{a:43}»",
    "dynatrace_token": "dt token «dt0c01.{U:24}.{h:64}»",
    "easypost_key": "shipping «EZAK{a:54}»",
    "flyio_token": "fly deploy -t «fo1_{w:43}»",
    "grafana_sa_token": "grafana «glsa_{a:32}_{h:8}».",
    "grafana_cloud_token": "grafana cloud «glc_{b:48}»",
    "terraform_token": "TFC token «{l:14}.atlasv1.{w:64}»",
    "heroku_key": "heroku auth «HRKU-AA{w:58}»",
    "linear_key": "linear «lin_api_{a:40}»",
    "notion_token": "notion «ntn_{d:11}{a:35}»",
    "planetscale_token": "pscale «pscale_tkn_{w:43}»",
    "postman_key": "postman «PMAK-{h:24}-{h:34}»",
    "prefect_key": "prefect «pnu_{a:36}»",
    "pulumi_token": "PULUMI_ACCESS_TOKEN=«pul-{h:40}»",
    "readme_key": "readme «rdme_{x:70}»",
    "rubygems_key": "gem push with «rubygems_{h:48}»",
    "sentry_user_token": "sentry «sntryu_{h:64}»",
    "shippo_key": "shippo «shippo_live_{h:40}»",
    "square_token": "square «sq0atp-{w:22}»",
    "vault_token": "VAULT_TOKEN=«hvs.{w:100}»",
    "sendinblue_key": "brevo «xkeysib-{h:64}-{a:16}»",
    "new_relic_key": "NEW_RELIC_API_KEY=«NRAK-{U:27}»",
    "mailchimp_key": "MAILCHIMP_KEY = «{h:32}-us12»",
    "mailgun_key": "mailgun «key-{h:32}» for receipts",
    "telegram_bot_token": "the bot answers with «{d:9}:AA{w:33}».",
    "discord_bot_token": "discord bot «M{a:23}.{w:6}.{w:27}»",
    "azure_storage_key": "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=«{b:86}==»;"
    "EndpointSuffix=core.windows.net",
    "google_oauth_secret": "client secret «GOCSPX-{w:28}»",
    "gcp_private_key_id": '{"type": "service_account", "private_key_id": "«{h:40}»"}',
    "aws_secret_bare": "the other half is «{b:40}»",
    "aws_secret_labelled": "aws_secret_access_key = «{b:40}»",
    "url_password": "postgres://admin:«{a:20}»@db.example.com/app",
    "bearer_token": "curl -H 'Authorization: Bearer «{a:32}»' https://api.example.com",
    "basic_auth": "Authorization: Basic «{b:28}»",
    "password_assignment": "password=«{a:16}»",
    "api_key_json": 'api_key: "«{a:24}»"',
    "client_secret": "client_secret = '«{a:24}»'",
    "wifi_password": "the wifi password is «{x:6}7{x:6}»",
    "repeated_label": "password: password: «{L:6}5{L:5}»",
    "pin": "my PIN is «{d:8}»",
    "door_code": "the door code for the garage is «{d:6}».",
    "passphrase": "my passphrase is '«{x:6} {x:7} {x:6} {x:7}»'",
    "api_key_sentence": "my OpenWeather api key is «{h:32}»",
    "private_tag": "<private>«{a:20}»</private>",
}

_FIELD = re.compile(r"\{([A-Za-z]):(\d+)\}")
_SECRET = re.compile(r"«(.*?)»", re.DOTALL)


def _card(rng: random.Random) -> str:
    body = "4" + "".join(rng.choice(string.digits) for _ in range(14))
    number = body + luhn.calc_check_digit(body)
    return " ".join(number[i : i + 4] for i in range(0, 16, 4))


def _iban(rng: random.Random) -> str:
    bban = "WEST" + "".join(rng.choice(string.digits) for _ in range(14))
    number = "GB" + iban.calc_check_digits("GB00" + bban) + bban
    return " ".join(number[i : i + 4] for i in range(0, len(number), 4))


def _ssn(rng: random.Random) -> str:
    return f"{rng.randint(1, 665):03d}-{rng.randint(1, 99):02d}-{rng.randint(1, 9999):04d}"


def _dni(rng: random.Random) -> str:
    n = rng.randint(10_000_000, 99_999_999)
    return f"{n}{'TRWAGMYFPDXBNJZSQVHLCKE'[n % 23]}"


def _cpf(rng: random.Random) -> str:
    body = "".join(rng.choice(string.digits[1:]) for _ in range(9))
    digits = body + cpf._calc_check_digits(body)
    return f"{digits[:3]}.{digits[3:6]}.{digits[6:9]}-{digits[9:]}"


def _aadhaar(rng: random.Random) -> str:
    body = rng.choice("23456789") + "".join(rng.choice(string.digits) for _ in range(10))
    number = body + verhoeff.calc_check_digit(body)
    return f"{number[:4]} {number[4:8]} {number[8:]}"


def _codice_fiscale(rng: random.Random) -> str:
    letters = "".join(rng.choice(string.ascii_uppercase) for _ in range(6))
    body = f"{letters}{rng.randint(50, 99)}{rng.choice('ABCDEHLMPRST')}{rng.randint(1, 28):02d}"
    body += f"{rng.choice('ABCDEFGHILMZ')}{rng.randint(100, 999)}"
    return body + codicefiscale.calc_check_digit(body)


def _nir(rng: random.Random) -> str:
    body = f"{rng.choice('12')}{rng.randint(50, 99)}{rng.randint(1, 12):02d}"
    body += f"{rng.randint(1, 95):02d}{rng.randint(1, 990):03d}{rng.randint(1, 999):03d}"
    return body + nir.calc_check_digits(body)


def _personnummer(rng: random.Random) -> str:
    date = f"{rng.randint(50, 99)}{rng.randint(1, 12):02d}{rng.randint(1, 28):02d}"
    serial = f"{rng.randint(0, 999):03d}"
    return f"{date}-{serial}{luhn.calc_check_digit(date + serial)}"


# kind -> (sentence with «{}» where the number goes, the number's maker)
NUMBERS: dict[str, tuple[str, Callable[[random.Random], str]]] = {
    "card_number": ("paid with card «{}» (exp 05/27)", _card),
    "iban": ("my IBAN is «{}», thanks", _iban),
    "us_ssn": ("SSN «{}» on the form", _ssn),
    "es_dni": ("DNI «{}»", _dni),
    "br_cpf": ("CPF «{}».", _cpf),
    "in_aadhaar": ("Aadhaar «{}»", _aadhaar),
    "it_codice_fiscale": ("codice fiscale «{}»", _codice_fiscale),
    "fr_nir": ("numéro de sécurité sociale «{}»", _nir),
    "se_personnummer": ("personnummer «{}»", _personnummer),
}


@dataclass(frozen=True)
class Planted:
    """One credential in its carrier: `text` holds `value`; `needles` are the parts of the value
    that must never be found after redaction (its random parts, 6+ characters)."""

    kind: str
    text: str
    value: str
    needles: tuple[str, ...]


def _fill(template: str, rng: random.Random) -> tuple[str, list[str]]:
    parts: list[str] = []

    def one(m: re.Match[str]) -> str:
        part = "".join(rng.choice(ALPHABETS[m.group(1)]) for _ in range(int(m.group(2))))
        parts.append(part)
        return part

    return _FIELD.sub(one, template), parts


def _bare_aws_secret(rng: random.Random) -> str:
    # A real secret access key holds all three classes; a random draw almost always does.
    while True:
        value = "".join(rng.choice(ALPHABETS["b"]) for _ in range(40))
        if (
            any(c.isupper() for c in value)
            and any(c.islower() for c in value)
            and any(c.isdigit() for c in value)
        ):
            return value


def corpus(seed: int = 0) -> list[Planted]:
    """Every kind once, with fresh values from `seed`."""
    rng = random.Random(seed)
    out: list[Planted] = []
    for kind, template in TEMPLATES.items():
        text, parts = _fill(template, rng)
        if kind == "aws_secret_bare":
            parts = [_bare_aws_secret(rng)]
            text = _SECRET.sub("«" + parts[0] + "»", text)
        value = _SECRET.search(text).group(1)  # type: ignore[union-attr]
        needles = tuple(p for p in parts if len(p) >= 6) or (value,)
        out.append(Planted(kind, _SECRET.sub(r"\1", text), value, needles))
    for kind, (sentence, make) in NUMBERS.items():
        value = make(rng)
        text = sentence.replace("«{}»", value)
        out.append(Planted(kind, text, value, (value,)))
    return out
