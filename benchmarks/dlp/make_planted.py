#!/usr/bin/env python3
"""Write the DLP benchmark's planted-secrets corpus: ~155 realistic internal documents
(runbooks, onboarding e-mails, configs in Markdown code blocks, .env files, YAML/JSON/INI/TOML,
docker-compose, Kubernetes secrets, CI files, incident reports, HR forms, support tickets,
meeting notes, README troubleshooting, wiki pages, finance pages, API cookbooks) with
credentials and PII planted among ordinary prose, code and tables.

    python benchmarks/dlp/make_planted.py OUT_DIR [--seed 1729]

Deterministic (one seeded random.Random; stdlib only). OUT_DIR/manifest.json lists
  planted    every value that must be redacted: doc, type, family, value, note (syntax),
             probes (body lines of a multi-line key / segments of a long value: all must go too)
  negatives  hard negatives inside the same documents that must survive intact
  incidental names, postal addresses, dates of birth, ids that are neither (a finding on one
             is reported, not counted as false)
All values are synthetic. Formats follow the public specifications (see values.py); they were
written blind to the project's detectors.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from values import Gen  # noqa: E402

SEED = 1729
VERSION = 1

FAMILY = {
    "cloud": [
        "aws_access_key_id",
        "aws_secret_access_key",
        "gcp_service_account_key",
        "gcp_api_key",
        "azure_storage_key",
        "azure_sas_signature",
    ],
    "code/registry": [
        "github_token",
        "github_fine_grained_pat",
        "gitlab_token",
        "npm_token",
        "pypi_token",
        "huggingface_token",
        "docker_hub_token",
    ],
    "saas": [
        "slack_token",
        "slack_webhook",
        "stripe_key",
        "stripe_webhook_secret",
        "openai_key",
        "anthropic_key",
        "twilio_api_key",
        "twilio_auth_token",
        "sendgrid_key",
        "mailgun_key",
    ],
    "keys/tokens": [
        "jwt",
        "private_key_rsa",
        "private_key_pkcs8",
        "private_key_ec",
        "private_key_openssh",
        "private_key_pgp",
        "private_key_encrypted",
        "private_key_b64",
        "bearer_token",
        "basic_auth_b64",
        "generic_api_key",
        "k8s_secret_b64",
    ],
    "passwords": ["db_password", "basic_auth_password", "password_prose", "password_config"],
    "contact pii": ["email", "phone_us", "phone_intl"],
    "financial pii": ["iban", "credit_card"],
    "national ids": [
        "us_ssn",
        "uk_nino",
        "de_tax_id",
        "fr_nir",
        "es_dni",
        "es_nie",
        "it_codice_fiscale",
        "nl_bsn",
        "be_national_number",
        "pl_pesel",
        "se_personnummer",
        "fi_hetu",
        "ca_sin",
        "in_aadhaar",
    ],
}
TYPE_FAMILY = {t: f for f, ts in FAMILY.items() for t in ts}

COMPANIES = [
    dict(name="Northwind Analytics", domain="northwind-analytics.com", internal="nwa.internal", short="nwa"),
    dict(name="Kestrel Logistics", domain="kestrel-logistics.io", internal="kestrel.corp", short="kst"),
    dict(name="Bluefin Health", domain="bluefinhealth.com", internal="bfh.local", short="bfh"),
    dict(name="Tallgrass Payments", domain="tallgrasspay.com", internal="tgp.internal", short="tgp"),
    dict(name="Orbital Foods", domain="orbitalfoods.co.uk", internal="orbital.lan", short="orb"),
    dict(name="Helix Robotics", domain="helixrobotics.de", internal="helix.intra", short="hlx"),
]
SERVICES = [
    "payments-api",
    "ledger",
    "notifications",
    "search-indexer",
    "billing-worker",
    "auth-gateway",
    "reporting",
    "inventory-sync",
    "webhooks",
    "data-export",
    "checkout",
    "customer-portal",
]
REGIONS = ["eu-west-1", "us-east-1", "eu-central-1", "us-west-2", "ap-southeast-2"]


RUNBOOK_TOPICS = ["database failover", "restore from backup", "cache flush", "rotating credentials", "queue backlog"]
EVENTS = ["Alert fired", "On-call acknowledged", "Key revoked", "Customers notified", "Fix deployed"]
STREETS = ["Elm Street", "Rue de la Paix", "Hauptstrasse", "Calle Mayor", "Kerkstraat", "Via Roma", "High Street"]
ACTIONS = ["rotate the leaked credentials", "write up the runbook", "book the venue", "review the access list"]
BICS = ["DEUTDEFF", "BNPAFRPP", "INGBNL2A", "NWBKGB2L"]


def fence(lang: str, body: str) -> str:
    return f"```{lang}\n{body.rstrip()}\n```"


class Corpus:
    def __init__(self, seed: int):
        self.g = Gen(seed)
        self.docs: list[Doc] = []
        self.planted: list[dict] = []
        self.negatives: list[dict] = []
        self.incidental: list[dict] = []
        self._cycles: dict[str, list] = {}

    def cycle(self, name: str, options: list):
        """Round-robin over ``options`` (shuffled once): every variant gets its share of documents."""
        if name not in self._cycles:
            self._cycles[name] = [self.g.sample(options, len(options)), 0]
        seq, i = self._cycles[name]
        self._cycles[name][1] = i + 1
        return seq[i % len(seq)]

    def doc(self, genre: str, slug: str, ext: str = "md") -> Doc:
        d = Doc(self, f"{len(self.docs) + 1:03d}-{genre}-{slug}.{ext}", genre)
        self.docs.append(d)
        return d


class Doc:
    def __init__(self, corpus: Corpus, name: str, genre: str):
        self.c, self.name, self.genre, self.parts = corpus, name, genre, []
        g = corpus.g
        self.g = g
        self.co = g.pick(COMPANIES)
        self.svc = g.pick(SERVICES)
        self.region = g.pick(REGIONS)

    def w(self, *parts: str) -> None:
        self.parts.extend(parts)

    def P(self, typ: str, value: str, note: str = "", probes: list[str] | tuple = ()) -> str:
        assert typ in TYPE_FAMILY, typ
        self.c.planted.append(dict(doc=self.name, type=typ, family=TYPE_FAMILY[typ], value=value, note=note, probes=list(probes)))
        return value

    def N(self, typ: str, value: str) -> str:
        self.c.negatives.append(dict(doc=self.name, type=typ, value=value))
        return value

    def I(self, typ: str, value: str) -> str:  # noqa: E743
        self.c.incidental.append(dict(doc=self.name, type=typ, value=value))
        return value

    # -- people of this document's company
    def person(self) -> tuple[str, str, str]:
        f, ln = self.g.person()
        self.I("person_name", f"{f} {ln}")
        return f, ln, self.g.email(f, ln, self.co["domain"])

    def mail(self, f: str, ln: str, note: str = "") -> str:
        return self.P("email", self.g.email(f, ln, self.co["domain"]), note)

    def phone(self, note: str = "", us: bool | None = None, nbsp: bool = False) -> str:
        us = self.g.chance(0.45) if us is None else us
        v = self.g.phone_us() if us else self.g.phone_intl()
        if nbsp:
            v, note = v.replace(" ", "\u00a0"), note + ", NBSP-separated"
        return self.P("phone_us" if us else "phone_intl", v, note)

    def text(self) -> str:
        return "\n".join(self.parts).rstrip() + "\n"


# ----------------------------------------------------------------------------- key/value items
# (KEY, value as written, [(type, planted substring)], [(neg type, negative substring)])


def items(d: Doc, name: str) -> list[tuple[str, str, list, list]]:
    g, co = d.g, d.co
    host = f"{d.svc}-db.{co['internal']}"
    if name == "aws":
        k, s = g.aws_key_id(g.pick(["AKIA", "AKIA", "ASIA"])), g.aws_secret()
        return [
            ("AWS_ACCESS_KEY_ID", k, [("aws_access_key_id", k)], []),
            ("AWS_SECRET_ACCESS_KEY", s, [("aws_secret_access_key", s)], []),
            ("AWS_DEFAULT_REGION", d.region, [], []),
        ]
    if name == "stripe":
        k, w = g.stripe(g.pick(["sk", "sk", "rk"])), g.stripe_whsec()
        return [("STRIPE_SECRET_KEY", k, [("stripe_key", k)], []), ("STRIPE_WEBHOOK_SECRET", w, [("stripe_webhook_secret", w)], [])]
    if name == "openai":
        k = g.openai()
        return [("OPENAI_API_KEY", k, [("openai_key", k)], []), ("OPENAI_MODEL", "gpt-4o-mini", [], [])]
    if name == "anthropic":
        k = g.anthropic()
        return [("ANTHROPIC_API_KEY", k, [("anthropic_key", k)], [])]
    if name == "hf":
        k = g.hf()
        return [("HF_TOKEN", k, [("huggingface_token", k)], [])]
    if name == "sendgrid":
        k = g.sendgrid()
        return [("SENDGRID_API_KEY", k, [("sendgrid_key", k)], []), ("MAIL_FROM", d.I("role_email", f"no-reply@{co['domain']}"), [], [])]
    if name == "twilio":
        sid, tok, key, sec = g.twilio_sid(), g.s("0123456789abcdef", 32), g.twilio_api_key(), g.opaque_token(32)
        d.I("twilio_account_sid", sid)
        return [
            ("TWILIO_ACCOUNT_SID", sid, [], []),
            ("TWILIO_AUTH_TOKEN", tok, [("twilio_auth_token", tok)], []),
            ("TWILIO_API_KEY", key, [("twilio_api_key", key)], []),
            ("TWILIO_API_SECRET", sec, [("generic_api_key", sec)], []),
        ]
    if name == "slack":
        t, sec = g.slack_bot(), g.s("0123456789abcdef", 32)
        return [("SLACK_BOT_TOKEN", t, [("slack_token", t)], []), ("SLACK_SIGNING_SECRET", sec, [("generic_api_key", sec)], [])]
    if name == "github":
        if g.chance(0.3):
            t = g.github_fine()
            return [("GITHUB_TOKEN", t, [("github_fine_grained_pat", t)], [])]
        t = g.github(g.pick(["ghp_", "ghp_", "gho_", "ghs_"]))
        return [("GITHUB_TOKEN", t, [("github_token", t)], [])]
    if name == "gitlab":
        t = g.gitlab()
        return [
            ("GITLAB_TOKEN", t, [("gitlab_token", t)], []),
            ("CI_API_V4_URL", f"https://gitlab.{co['internal']}/api/v4", [], [("version", "/api/v4")]),
        ]
    if name == "npm":
        t = g.npm()
        return [("NPM_TOKEN", t, [("npm_token", t)], [])]
    if name == "gcp":
        k = g.gcp_api_key()
        return [("GOOGLE_MAPS_API_KEY", k, [("gcp_api_key", k)], [])]
    if name == "db":
        pw = g.url_password()
        url = f"postgres://{d.svc.replace('-', '_')}:{pw}@{host}:5432/{d.svc.replace('-', '_')}"
        return [("DATABASE_URL", url, [("db_password", pw)], []), ("DB_POOL_SIZE", "20", [], [])]
    if name == "db_split":
        pw = g.password()
        return [
            ("DB_HOST", host, [], []),
            ("DB_USER", "app", [], []),
            ("DB_PASS", pw, [("password_config", pw)], []),
            ("DB_PORT", "5432", [], []),
        ]
    if name == "redis":
        pw = g.url_password()
        return [("REDIS_URL", f"redis://:{pw}@redis.{co['internal']}:6379/0", [("db_password", pw)], [])]
    if name == "mongo":
        pw = g.url_password()
        return [
            (
                "MONGODB_URI",
                f"mongodb+srv://{d.svc}-rw:{pw}@cluster0.{g.s('abcdefghijklmnopqrstuvwxyz0123456789', 5)}.mongodb.net/"
                f"prod?retryWrites=true&w=majority",
                [("db_password", pw)],
                [],
            )
        ]
    if name == "mysql":
        pw = g.url_password()
        return [("MYSQL_URL", f"mysql://root:{pw}@mysql-primary.{co['internal']}:3306/shop", [("db_password", pw)], [])]
    if name == "amqp":
        pw = g.url_password()
        return [("CELERY_BROKER_URL", f"amqp://celery:{pw}@rabbitmq.{co['internal']}:5672//", [("db_password", pw)], [])]
    if name == "django":
        k = g.django_secret()
        return [("DJANGO_SECRET_KEY", k, [("generic_api_key", k)], []), ("DJANGO_SETTINGS_MODULE", "config.settings.production", [], [])]
    if name == "datadog":
        a, b = g.s("0123456789abcdef", 32), g.s("0123456789abcdef", 40)
        return [
            ("DD_API_KEY", a, [("generic_api_key", a)], []),
            ("DD_APP_KEY", b, [("generic_api_key", b)], []),
            ("DD_SITE", "datadoghq.eu", [], []),
        ]
    if name == "jwt_secret":
        k = g.s("0123456789abcdef", 64)
        return [("JWT_SECRET", k, [("generic_api_key", k)], []), ("JWT_TTL_SECONDS", "3600", [], [])]
    if name == "smtp":
        pw = g.password()
        return [
            ("SMTP_HOST", "smtp.office365.com", [], []),
            ("SMTP_USER", d.I("role_email", f"alerts@{co['domain']}"), [], []),
            ("SMTP_PASSWORD", pw, [("password_config", pw)], []),
        ]
    if name == "azure":
        key = g.azure_account_key()
        acct = f"{co['short']}prod{g.pick(['logs', 'assets', 'backups'])}"
        cs = f"DefaultEndpointsProtocol=https;AccountName={acct};AccountKey={key};EndpointSuffix=core.windows.net"
        return [("AZURE_STORAGE_CONNECTION_STRING", cs, [("azure_storage_key", key)], [])]
    if name == "mailgun":
        k = g.mailgun()
        return [("MAILGUN_API_KEY", k, [("mailgun_key", k)], []), ("MAILGUN_DOMAIN", f"mg.{co['domain']}", [], [])]
    if name == "pypi":
        t = g.pypi()
        return [("TWINE_USERNAME", "__token__", [], []), ("TWINE_PASSWORD", t, [("pypi_token", t)], [])]
    if name == "docker":
        t = "dckr_pat_" + g.s("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", 27)
        return [("DOCKERHUB_USERNAME", f"{co['short']}ci", [], []), ("DOCKERHUB_TOKEN", t, [("docker_hub_token", t)], [])]
    if name == "generic":
        k = g.opaque_token(g.pick([32, 40, 48]))
        key = g.pick(
            ["PARTNER_API_KEY", "SEGMENT_WRITE_KEY", "ALGOLIA_ADMIN_KEY", "INTERNAL_API_TOKEN", "ENCRYPTION_KEY", "WEBHOOK_SECRET"]
        )
        return [(key, k, [("generic_api_key", k)], [])]
    # harmless settings and placeholders (hard negatives)
    if name == "plain":
        sha = g.sha()
        return [
            ("NODE_ENV", "production", [], []),
            ("PORT", "8080", [], []),
            ("LOG_LEVEL", "info", [], []),
            ("API_BASE_URL", f"https://api.{co['domain']}/api/v1", [], [("version", "/api/v1")]),
            ("BUILD_SHA", sha, [], [("git_sha", sha)]),
        ]
    if name == "placeholders":
        return [
            ("SENTRY_DSN", "${SENTRY_DSN}", [], [("placeholder", "${SENTRY_DSN}")]),
            ("DB_PASSWORD", "${DB_PASSWORD}", [], [("placeholder", "${DB_PASSWORD}")]),
            ("OPENAI_API_KEY", "<your-openai-key>", [], [("placeholder", "<your-openai-key>")]),
        ]
    raise ValueError(name)


SECRET_ITEMS = [
    "aws",
    "stripe",
    "openai",
    "anthropic",
    "hf",
    "sendgrid",
    "twilio",
    "slack",
    "github",
    "gitlab",
    "npm",
    "gcp",
    "db",
    "db_split",
    "redis",
    "mongo",
    "mysql",
    "amqp",
    "django",
    "datadog",
    "jwt_secret",
    "smtp",
    "azure",
    "mailgun",
    "pypi",
    "docker",
    "generic",
]


def render(d: Doc, its: list, style: str, indent: str = "") -> str:
    out = []
    for key, val, plants, negs in its:
        if style == "k8s_data":
            enc = base64.b64encode(val.encode()).decode()
            if plants:
                d.P("k8s_secret_b64", enc, "k8s Secret data (base64 of the value)")
            out.append(f"{indent}{key.lower().replace('_', '-')}: {enc}")
            continue
        for typ, sub in plants:
            d.P(typ, sub, style)
        for typ, sub in negs:
            d.N(typ, sub)
        if style == "env":
            out.append(f"{indent}{key}={val}")
        elif style == "env_q":
            out.append(f'{indent}{key}="{val}"')
        elif style == "export":
            out.append(f'{indent}export {key}="{val}"' if d.g.chance(0.6) else f"{indent}export {key}={val}")
        elif style == "yaml":
            out.append(f'{indent}{key}: "{val}"' if not val.isdigit() else f"{indent}{key}: {val}")
        elif style == "yaml_bare":
            out.append(f"{indent}{key}: {val}")
        elif style == "yaml_list":
            out.append(f"{indent}- {key}={val}")
        elif style == "json":
            out.append(f'{indent}"{key}": "{val}",')
        elif style == "toml":
            out.append(f'{indent}{key.lower()} = "{val}"')
        elif style == "ini":
            out.append(f"{indent}{key.lower()} = {val}")
        else:
            raise ValueError(style)
    if style == "json" and out:
        out[-1] = out[-1].rstrip(",")
    return "\n".join(out)


def pick_items(d: Doc, k: int) -> list:
    its = []
    names: list[str] = []
    while len(names) < k:  # round-robin over the kinds, no repeats within a document
        name = d.c.cycle("items", SECRET_ITEMS)
        if name not in names:
            names.append(name)
    for name in names:
        its.extend(items(d, name))
    if d.g.chance(0.7):
        its.extend(items(d, "plain"))
    if d.g.chance(0.4):
        its.extend(items(d, "placeholders"))
    return its


# ----------------------------------------------------------------------------- reusable blocks


def pem_block(d: Doc, kind: str | None = None, note: str = "", indent: str = "") -> str:
    kind = kind or d.c.cycle("pem", ["rsa", "pkcs8", "ec", "openssh", "pgp", "encrypted"])
    text, lines = d.g.pem(kind)
    text = "\n".join(indent + ln if ln else ln for ln in text.splitlines())
    body = [ln for ln in lines if len(ln) >= 40]
    probes = [body[0], body[len(body) // 2], body[-1]] if len(body) >= 3 else body
    d.P(f"private_key_{kind}", text, note or "PEM block", probes)
    return text


def negatives_code(d: Doc) -> str:
    """A realistic FastAPI/Django snippet whose identifiers look secret-ish but are not."""
    g = d.g
    if g.chance(0.5):
        for n in [
            "OAuth2PasswordRequestForm",
            "secrets.compare_digest",
            "status.HTTP_403_FORBIDDEN",
            'os.environ["API_KEY"]',
            "settings.SECRET_KEY",
        ]:
            d.N("code_identifier" if "environ" not in n and "settings" not in n else "placeholder", n)
        return fence(
            "python",
            """from fastapi import Depends, FastAPI, HTTPException, status
from fastapi.security import OAuth2PasswordBearer, OAuth2PasswordRequestForm
import os
import secrets

app = FastAPI()
oauth2_scheme = OAuth2PasswordBearer(tokenUrl="token")
API_KEY = os.environ["API_KEY"]


def check_api_key(x_api_key: str) -> None:
    # constant-time comparison, never ==
    if not secrets.compare_digest(x_api_key, API_KEY):
        raise HTTPException(status_code=status.HTTP_403_FORBIDDEN, detail="bad key")


@app.post("/token")
async def login(form: OAuth2PasswordRequestForm = Depends()):
    user = authenticate(form.username, form.password)
    return {"access_token": create_token(user, settings.SECRET_KEY), "token_type": "bearer"}""",
        )
    for n in [
        "PASSWORD_HASHERS",
        "AUTH_PASSWORD_VALIDATORS",
        "django.contrib.auth.hashers.Argon2PasswordHasher",
        "UserAttributeSimilarityValidator",
        'os.environ.get("DJANGO_SECRET_KEY")',
    ]:
        d.N("code_identifier" if "environ" not in n else "placeholder", n)
    return fence(
        "python",
        """SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY")

PASSWORD_HASHERS = [
    "django.contrib.auth.hashers.Argon2PasswordHasher",
    "django.contrib.auth.hashers.PBKDF2PasswordHasher",
]

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator", "OPTIONS": {"min_length": 12}},
]
SESSION_COOKIE_SECURE = True""",
    )


def checksum_list(d: Doc, n: int = 3) -> str:
    g = d.g
    ver = g.version().lstrip("v")
    names = [
        f"{d.svc}-{ver}-linux-amd64.tar.gz",
        f"{d.svc}-{ver}-darwin-arm64.tar.gz",
        f"{d.svc}-{ver}.sbom.json",
        f"{d.svc}-{ver}-windows-amd64.zip",
    ][:n]
    rows = []
    for nm in names:
        h = g.sha256_of(nm)
        rows.append(f"{d.N('file_hash', h)}  {nm}")
    return fence("text", "\n".join(rows))


def escalation_table(d: Doc, n: int = 3) -> str:
    rows = ["| Role | Name | Phone | E-mail |", "|---|---|---|---|"]
    for role in ["Primary on-call", "Secondary on-call", "Engineering manager", "Security"][:n]:
        f, ln, _ = d.person()
        rows.append(f"| {role} | {f} {ln} | {d.phone('table')} | {d.mail(f, ln, 'table')} |")
    return "\n".join(rows)


def signature(d: Doc, f: str, ln: str) -> str:
    title = d.g.pick(
        [
            "Senior SRE",
            "Platform Engineer",
            "IT Operations",
            "People Partner",
            "Engineering Manager",
            "Support Lead",
            "Finance Operations",
            "Security Engineer",
        ]
    )
    return f"--\n{f} {ln} | {title} | {d.co['name']}\nm: {d.phone('signature')} | e: {d.mail(f, ln, 'signature')}"


NATIONAL_IDS = FAMILY["national ids"]  # one list: the report groups by FAMILY
ID_LABEL = {
    "us_ssn": "SSN",
    "uk_nino": "NI number",
    "de_tax_id": "Steuer-ID",
    "fr_nir": "numéro de sécurité sociale",
    "es_dni": "DNI",
    "es_nie": "NIE",
    "it_codice_fiscale": "codice fiscale",
    "nl_bsn": "BSN",
    "be_national_number": "rijksregisternummer",
    "pl_pesel": "PESEL",
    "se_personnummer": "personnummer",
    "fi_hetu": "henkilötunnus",
    "ca_sin": "SIN",
    "in_aadhaar": "Aadhaar",
}
ID_IBAN = {
    "us_ssn": "DE",
    "uk_nino": "GB",
    "de_tax_id": "DE",
    "fr_nir": "FR",
    "es_dni": "ES",
    "es_nie": "ES",
    "it_codice_fiscale": "IT",
    "nl_bsn": "NL",
    "be_national_number": "BE",
    "pl_pesel": "PL",
    "se_personnummer": "DE",
    "fi_hetu": "DE",
    "ca_sin": "IE",
    "in_aadhaar": "GB",
}


def national_id(d: Doc, typ: str, first: str = "Maria", last: str = "Rossi") -> str:
    g = d.g
    return {
        "us_ssn": g.ssn,
        "uk_nino": g.nino,
        "de_tax_id": g.de_idnr,
        "fr_nir": g.fr_nir,
        "es_dni": g.es_dni,
        "es_nie": g.es_nie,
        "it_codice_fiscale": lambda: g.it_cf(first, last),
        "nl_bsn": g.nl_bsn,
        "be_national_number": g.be_nn,
        "pl_pesel": g.pl_pesel,
        "se_personnummer": g.se_pnr,
        "fi_hetu": g.fi_hetu,
        "ca_sin": g.ca_sin,
        "in_aadhaar": g.aadhaar,
    }[typ]()


def prose_password(d: Doc) -> str:
    g = d.g
    pw = g.password()
    who = g.pick(
        [
            "the shared ops mailbox",
            "the Grafana admin account",
            "the conference-room iPad",
            "the staging Jenkins",
            "the Meraki dashboard",
            "the old Nagios box",
            "the QA test user",
            "the Synology NAS",
        ]
    )
    templ = g.pick(
        [
            "The password for {who} is {pw} - please don't change it without telling the team.",
            "Temporary password: {pw} (you will be asked to change it at first login).",
            "For {who}, log in as admin with password {pw} until SSO is wired up.",
            "FYI the wifi password is {pw} for the guest network this week.",
            "Password for {who} was reset to {pw} by the helpdesk this morning.",
            "{who}: user `admin`, pass `{pw}`.",
            "Login for {who} -> admin / {pw}",
            "I've set the passphrase for {who} to {pw}, it's also in the team vault.",
            "pwd for {who} is {pw}",
            'Use the PIN-less login: username svc-qa, password "{pw}".',
        ]
    )
    d.P("password_prose", pw, templ.split("{pw}")[0][-24:].strip() or "prose")
    return templ.format(who=who, pw=pw)


def prose_negatives(d: Doc) -> str:
    g = d.g
    opts = [
        ("The database password is stored in Vault at `secret/data/prod/db`; never paste it into tickets.", "password is stored in Vault"),
        ("Passwords must be at least 14 characters and are rotated every 90 days.", "Passwords must be at least 14 characters"),
        ("The API token expires after 3600 seconds, so the job refreshes it before every batch.", "token expires after 3600 seconds"),
        ("Ask #platform-team for the API key; it is issued per service.", "Ask #platform-team for the API key"),
        ("Password-less login via Okta Verify is the default for all staff.", "Password-less login via Okta Verify"),
        ("The secret is mounted at /var/run/secrets/app and read once at start-up.", "The secret is mounted at /var/run/secrets/app"),
        ("If the token is invalid the API answers 401 and the client re-authenticates.", "If the token is invalid the API answers 401"),
        ('The credentials are in 1Password under "Prod DB (read-only)".', "The credentials are in 1Password"),
        ("password: see the team vault", "password: see the team vault"),
        (
            "Reset your password from the self-service portal; the helpdesk cannot see it.",
            "Reset your password from the self-service portal",
        ),
        (
            "Export AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN from the SSO helper; never hard-code them.",
            "AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN",
            "env_var_name",
        ),
        ("The job fails fast if STRIPE_SECRET_KEY is unset.", "if STRIPE_SECRET_KEY is unset", "env_var_name"),
        (
            "Set GITHUB_TOKEN in the repository settings, not in the workflow file.",
            "Set GITHUB_TOKEN in the repository settings",
            "env_var_name",
        ),
        ("Exported configs show `password: ****`; the tool masks them.", "password: ****", "placeholder"),
        ("In Helm the value is templated as `{{ .Values.db.password }}`.", "{{ .Values.db.password }}", "placeholder"),
        ("Ansible reads it from `{{ vault_db_password }}` at deploy time.", "{{ vault_db_password }}", "placeholder"),
        (
            "The client secret comes from `$(cat /run/secrets/client_secret)` inside the container.",
            "$(cat /run/secrets/client_secret)",
            "placeholder",
        ),
        ("Put your key in place of YOUR_API_KEY_HERE before running the script.", "YOUR_API_KEY_HERE", "placeholder"),
    ]
    opt = g.pick(opts)
    d.N(opt[2] if len(opt) > 2 else "prose_context", opt[1])
    return opt[0]


def neg_misc(d: Doc) -> str:
    """One sentence with an id-like value that is not a secret."""
    g = d.g
    kind = g.int(0, 9)
    if kind == 0:
        sha = g.sha()
        return f"The regression was introduced in commit {d.N('git_sha', sha)} and reverted the same day."
    if kind == 1:
        u = g.uuid()
        return f"Request ID `{d.N('uuid', u)}` shows up in every log line for the failed call."
    if kind == 2:
        acct = g.aws_account()
        arn = f"arn:aws:iam::{acct}:role/{d.svc}-deploy"
        return f"The pipeline assumes `{d.N('cloud_resource_id', arn)}` before it touches the bucket."
    if kind == 3:
        return f"See ticket {d.N('order_number', g.order_no())}, opened {d.N('date', g.date())}."
    if kind == 4:
        ami = "ami-0" + g.sha(16)
        return f"Nodes now boot from {d.N('cloud_resource_id', ami)} (Amazon Linux 2023)."
    if kind == 5:
        short = g.sha(g.pick([7, 8, 12]))
        return f"Fixed in {d.N('git_sha', short)}; the release notes are under {d.N('version', g.version())}."
    if kind == 6:
        dig = "sha256:" + g.sha(64)
        return f"Pin the image by digest: `{d.svc}@{d.N('file_hash', dig)}`."
    if kind == 7:
        url = (
            f"https://github.com/{d.co['short']}-eng/{d.svc}/blob/{g.sha()}/src/{d.svc.replace('-', '_')}/handlers/"
            f"webhook_signature_validator.py#L{g.int(20, 400)}"
        )
        return f"The signature check lives in {d.N('url', url)}."
    if kind == 8:
        ts = str(1700000000000 + g.int(0, 10**10))
        return f"The last successful sync finished at epoch-ms {d.N('numeric_id', ts)}."
    trk = "1Z" + g.s("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", 6) + g.digits(10)
    return f"The replacement laptop shipped with UPS tracking {d.N('numeric_id', trk)}."


FILLER = [
    "Most of this is automated now, but the manual steps are kept here for when the automation itself is the thing that broke.",
    "Check the dashboard first: if p99 latency is under 300 ms and the error rate is flat, it is probably not the database.",
    "We moved this service to the shared cluster in Q2; the old VMs are gone, so ignore any runbook that mentions them.",
    "Please keep this page up to date. If something here is wrong, fix it rather than adding a comment at the bottom.",
    "The nightly job runs at 02:30 UTC and usually takes around forty minutes; alerts fire if it is still running at 04:00.",
    "Feature flags are read at start-up, so a config change needs a rolling restart to take effect.",
    "The staging environment mirrors production except for the payment provider, which points at the sandbox.",
    "This was last reviewed during the quarterly access review; the owners listed below signed it off.",
    "Logs are kept for 30 days in the hot tier and a year in cold storage; ask Security before pulling anything older.",
    "The health endpoint only checks the process, not its dependencies, so a green check does not mean the service works.",
]


def filler(d: Doc, k: int = 1) -> str:
    return " ".join(d.g.sample(FILLER, k))


# ----------------------------------------------------------------------------- genres


def runbook(c: Corpus) -> None:
    d = c.doc("runbook", c.g.pick(["db-failover", "restore", "cache-flush", "key-rotation", "cert-renewal", "queue-backlog"]))
    g, co = d.g, d.co
    db = d.svc.replace("-", "_")
    d.w(
        f"# Runbook: {d.svc} - {g.pick(RUNBOOK_TOPICS)}",
        "",
        f"Owner: {d.person()[0]} ({co['name']} platform team). Last reviewed {d.N('date', g.date())}.",
        "",
        filler(d, 2),
        "",
    )
    d.w("## Access", "")
    if g.chance(0.5):
        d.w(f"Jump through the bastion `bastion.{co['internal']}` as `ops`. " + prose_password(d), "")
    d.w(
        "The deploy key for the bastion (read-only, rotated yearly) is below. Save it as `~/.ssh/bastion_ops` with mode 0600.",
        "",
        fence("text", pem_block(d, note="runbook deploy key")),
        "",
    )
    d.w(prose_negatives(d), "")
    d.w("## Steps", "", "1. Confirm the primary is really down:", "")
    pw = g.url_password()
    d.P("db_password", pw, "psql URI")
    d.w(fence("bash", f'psql "postgresql://{db}_admin:{pw}@db-primary.{co["internal"]}:5432/{db}?sslmode=require" -c "select now()"'), "")
    if g.chance(0.6):
        rpw = g.password("random")
        d.P("password_config", rpw, "redis-cli -a")
        d.w(
            "2. Flush the session cache (it is safe, users just log in again):",
            "",
            fence("bash", f"redis-cli -h redis.{co['internal']} -p 6379 -a '{rpw}' --no-auth-warning FLUSHDB"),
            "",
        )
    dash = f"https://grafana.{co['internal']}/d/{g.s('abcdef012345', 9)}/{d.svc}-overview?orgId=1&refresh=30s&var-env=prod&from=now-6h"
    d.w(f"3. Restart the deployment: `kubectl -n {d.svc} rollout restart deployment/{d.svc}` and watch {d.N('url', dash)}.", "")
    if g.chance(0.5):
        its = items(d, g.pick(["aws", "datadog", "slack", "azure"]))
        d.w(
            "4. If the restore job needs cloud access, export these first (break-glass only):",
            "",
            fence("bash", render(d, its, "export")),
            "",
        )
    if g.chance(0.35):
        wh, sec = g.slack_webhook()
        d.P("slack_webhook", sec, "alertmanager slack_api_url")
        d.w(
            "Alerts go to #ops-alerts through Alertmanager:",
            "",
            fence("yaml", f"receivers:\n  - name: ops-slack\n    slack_configs:\n      - api_url: {wh}\n        channel: '#ops-alerts'"),
            "",
        )
    d.w(neg_misc(d), "", "## Escalation", "", escalation_table(d, g.int(2, 4)), "")
    if g.chance(0.5):
        d.w("## Release checksums", "", checksum_list(d), "")


def onboarding_email(c: Corpus) -> None:
    d = c.doc("onboarding-email", c.g.pick(["welcome", "first-day", "it-setup", "accounts"]), "txt")
    g, co = d.g, d.co
    f, ln, work = d.person()
    sf, sln, _ = d.person()
    d.P("email", work, "To: header")
    sender = d.mail(sf, sln, "From: header")
    personal = d.P("email", g.personal_email(f, ln), "Cc: personal address")
    d.w(
        f"From: {sf} {sln} <{sender}>",
        f"To: {f} {ln} <{work}>",
        f"Cc: {personal}",
        f"Date: {d.N('date', g.date())}",
        f"Subject: Welcome to {co['name']} - your accounts",
        "",
        f"Hi {f},",
        "",
        f"Welcome aboard! Your laptop is ready for pick-up at reception on your first day ({d.N('date', g.date())}).",
        "",
    )
    tmp = g.password(g.pick(["human", "leet", "random"]))
    d.P("password_prose", tmp, "temporary password in e-mail")
    d.w(
        f"Your username is {f.lower()}.{ln.lower().replace(' ', '')} and your temporary password is {tmp} - you will be asked to "
        "change it the first time you sign in. Please enrol Okta Verify the same day.",
        "",
    )
    wifi = g.password(g.pick(["human", "passphrase"]))
    d.P("password_prose", wifi, "wifi")
    d.w(f'Office Wi-Fi: network "{co["short"].upper()}-Corp", the wifi password is {wifi} (the guest network is separate).', "")
    if g.chance(0.5):
        d.w(prose_negatives(d), "")
    typ = c.cycle("national-id", NATIONAL_IDS)
    label, val = ID_LABEL[typ], national_id(d, typ, f, ln)
    d.P(typ, val, "e-mail thread")
    iban, _ = g.iban(ID_IBAN[typ])
    d.P("iban", iban, "e-mail thread")
    d.w(
        "Payroll already has what you sent on the form:",
        "",
        f"> {label}: {val}",
        f"> Bank account (IBAN): {iban}",
        "",
        "so there is nothing else to do there.",
        "",
    )
    d.w(
        f"Your manager, {sf}, has booked a 1:1 for your first afternoon. If anything goes wrong call the IT desk on {d.phone('prose')}.",
        "",
        "Best,",
        signature(d, sf, sln),
    )


def app_config(c: Corpus) -> None:
    d = c.doc("config", c.g.pick(["django-settings", "spring", "dotnet", "wordpress", "rails", "frontend"]))
    g, co = d.g, d.co
    kind = c.cycle("app-config", [0, 1, 2, 3, 4, 5])
    d.w(f"# {d.svc}: configuration", "", filler(d), "")
    if kind == 0:
        sk, pw, epw = g.django_secret(), g.password(), g.password()
        d.P("generic_api_key", sk, "Django SECRET_KEY")
        d.P("password_config", pw, "Django DATABASES PASSWORD")
        d.P("password_config", epw, "EMAIL_HOST_PASSWORD")
        d.w(
            "Production settings as deployed (`config/settings/production.py`):",
            "",
            fence(
                "python",
                f'''SECRET_KEY = "{sk}"
DEBUG = False
ALLOWED_HOSTS = ["{d.svc}.{co["domain"]}"]

DATABASES = {{
    "default": {{
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "{d.svc.replace("-", "_")}",
        "USER": "app",
        "PASSWORD": "{pw}",
        "HOST": "pg.{co["internal"]}",
        "PORT": 5432,
    }}
}}

EMAIL_HOST = "smtp.sendgrid.net"
EMAIL_HOST_USER = "apikey"
EMAIL_HOST_PASSWORD = "{epw}"''',
            ),
            "",
            "Password hashing is configured as follows (unchanged from the template):",
            "",
            negatives_code(d),
            "",
        )
    elif kind == 1:
        pw, mpw = g.password(), g.password()
        d.P("password_config", pw, "spring.datasource.password")
        d.P("password_config", mpw, "spring.mail.password")
        k = g.opaque_token(40)
        d.P("generic_api_key", k, "properties api-key")
        d.w(
            "`src/main/resources/application-prod.properties`:",
            "",
            fence(
                "properties",
                f"""spring.datasource.url=jdbc:postgresql://pg.{co["internal"]}:5432/{d.svc.replace("-", "_")}
spring.datasource.username=app
spring.datasource.password={pw}
spring.jpa.hibernate.ddl-auto=validate
spring.mail.host=smtp.office365.com
spring.mail.username={d.I("role_email", "alerts@" + co["domain"])}
spring.mail.password={mpw}
partner.api-key={k}
management.endpoints.web.exposure.include=health,info""",
            ),
            "",
        )
    elif kind == 2:
        pw = g.password("random")
        d.P("password_config", pw, "ADO.NET connection string Password=")
        its = items(d, "azure")
        d.w(
            "`appsettings.Production.json`:",
            "",
            fence(
                "json",
                f"""{{
  "ConnectionStrings": {{
    "Default": "Server=tcp:{co["short"]}-sql.database.windows.net,1433;Initial Catalog={d.svc};User ID=appuser;Password={pw};Encrypt=True;"
  }},
  "Storage": {{
{render(d, its, "json", "    ")}
  }},
  "Logging": {{ "LogLevel": {{ "Default": "Information" }} }}
}}""",
            ),
            "",
        )
    elif kind == 3:
        pw = g.password()
        d.P("password_config", pw, "wp-config define DB_PASSWORD")
        salts = [g.s("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789!@#%^&*()-_=+[]{}<>~", 64) for _ in range(2)]
        for s in salts:
            d.P("generic_api_key", s, "wp-config AUTH_KEY salt")
        d.w(
            "The marketing site's `wp-config.php` (trimmed):",
            "",
            fence(
                "php",
                f"""define( 'DB_NAME', 'wp_marketing' );
define( 'DB_USER', 'wp_admin' );
define( 'DB_PASSWORD', '{pw}' );
define( 'DB_HOST', 'mysql.{co["internal"]}' );
define( 'AUTH_KEY',         '{salts[0]}' );
define( 'SECURE_AUTH_KEY',  '{salts[1]}' );""",
            ),
            "",
        )
    elif kind == 4:
        pw = g.password()
        d.P("password_config", pw, "database.yml password:")
        mk = g.s("0123456789abcdef", 32)
        d.P("generic_api_key", mk, "Rails master.key")
        d.w(
            "`config/database.yml` (production block):",
            "",
            fence(
                "yaml",
                f"""production:
  adapter: postgresql
  host: pg.{co["internal"]}
  database: {d.svc.replace("-", "_")}_production
  username: rails
  password: {pw}
  pool: <%= ENV.fetch("RAILS_MAX_THREADS") {{ 5 }} %>""",
            ),
            "",
            f"and `config/master.key` is `{mk}` (do not commit it again).",
            "",
        )
    else:
        k = g.gcp_api_key()
        d.P("gcp_api_key", k, "firebase config")
        sid = g.s("0123456789", 12)
        d.w(
            "Front-end runtime config (`src/config.ts`):",
            "",
            fence(
                "ts",
                f'''export const firebaseConfig = {{
  apiKey: "{k}",
  authDomain: "{co["short"]}-prod.firebaseapp.com",
  projectId: "{co["short"]}-prod",
  messagingSenderId: "{d.N("numeric_id", sid)}",
}};''',
            ),
            "",
        )
        if g.chance(0.6):
            ok = g.openai()
            d.P("openai_key", ok, "OpenAI(api_key=)")
            d.w(
                "and the summariser calls the model directly (this should go through the backend):",
                "",
                fence(
                    "python",
                    f'''from openai import OpenAI
client = OpenAI(api_key="{ok}")
resp = client.chat.completions.create(model="gpt-4o-mini", messages=[{{"role": "user", "content": text}}])''',
                ),
                "",
            )
    d.w(neg_misc(d), "", neg_misc(d))


def dotenv(c: Corpus) -> None:
    d = c.doc("dotenv", c.g.pick(["local", "prod-copy", "staging", "worker"]), c.g.pick(["md", "txt"]))
    g = d.g
    its = pick_items(d, g.int(3, 6))
    g.r.shuffle(its)
    style = g.pick(["env", "env", "env_q", "export"])
    if d.name.endswith(".txt"):
        d.w(
            f"# .env for {d.svc} ({g.pick(['copied from prod for debugging', 'staging', 'local dev, do not commit'])})",
            render(d, its, style),
        )
    else:
        f, ln, _ = d.person()
        d.w(
            f"# Local setup for {d.svc}",
            "",
            f"{f} asked for the env file in chat, pasting it here so it is in one place:",
            "",
            fence("bash", render(d, its, style)),
            "",
            prose_negatives(d),
            "",
            neg_misc(d),
        )


def config_formats(c: Corpus) -> None:
    kind = c.cycle(
        "config", ["yaml", "json", "ini", "toml", "xml", "aws", "pypirc", "npmrc", "netrc", "pgpass", "mycnf", "gitcred", "gcp-sa", "ssh"]
    )
    d = c.doc("config", kind)
    g, co = d.g, d.co
    d.w(f"# {d.svc}: {kind} configuration", "", filler(d), "")
    if kind == "yaml":
        its = pick_items(d, 3)
        d.w(
            fence(
                "yaml", "app:\n  name: " + d.svc + "\n  env: production\nsecrets:\n" + render(d, its, g.pick(["yaml", "yaml_bare"]), "  ")
            )
        )
    elif kind == "json":
        its = pick_items(d, 3)
        d.w(fence("json", "{\n" + render(d, its, "json", "  ") + "\n}"))
    elif kind == "ini":
        its = pick_items(d, 2)
        pw = g.password()
        d.P("password_config", pw, "ini password =")
        d.w(
            fence(
                "ini", f"[database]\nhost = pg.{co['internal']}\nuser = reporting\npassword = {pw}\n\n[services]\n" + render(d, its, "ini")
            )
        )
    elif kind == "toml":
        its = pick_items(d, 3)
        d.w(fence("toml", f"[server]\nport = 8080\n\n[secrets]\n{render(d, its, 'toml')}"))
    elif kind == "xml":
        pw = g.password()
        d.P("password_config", pw, "maven settings.xml <password>")
        d.w(
            "`~/.m2/settings.xml` used by the release job:",
            "",
            fence(
                "xml",
                f"""<settings>
  <servers>
    <server>
      <id>{co["short"]}-releases</id>
      <username>deployer</username>
      <password>{pw}</password>
    </server>
  </servers>
</settings>""",
            ),
        )
    elif kind == "aws":
        k, s = g.aws_key_id(), g.aws_secret()
        d.P("aws_access_key_id", k, "~/.aws/credentials")
        d.P("aws_secret_access_key", s, "~/.aws/credentials")
        d.w(
            "`~/.aws/credentials` on the build box:",
            "",
            fence(
                "ini",
                f"""[default]
aws_access_key_id = {k}
aws_secret_access_key = {s}
region = {d.region}""",
            ),
            "",
            f"The role it assumes is documented in {d.N('url', 'https://docs.aws.amazon.com/IAM/latest/UserGuide/id_credentials_access-keys.html')}.",
        )
    elif kind == "pypirc":
        t = g.pypi()
        d.P("pypi_token", t, ".pypirc password")
        d.w("`~/.pypirc`:", "", fence("ini", f"[distutils]\nindex-servers = pypi\n\n[pypi]\nusername = __token__\npassword = {t}"))
    elif kind == "npmrc":
        t = g.npm()
        d.P("npm_token", t, ".npmrc _authToken")
        d.w(
            "`.npmrc` in the monorepo root:",
            "",
            fence("ini", f"@{co['short']}:registry=https://registry.npmjs.org/\n//registry.npmjs.org/:_authToken={t}\nalways-auth=true"),
            "",
            "In CI use `${NPM_TOKEN}` instead.",
        )
        d.N("placeholder", "${NPM_TOKEN}")
    elif kind == "netrc":
        pw = g.password()
        d.P("password_config", pw, ".netrc password")
        d.w(
            "`~/.netrc` for the artifact mirror:", "", fence("text", f"machine artifacts.{co['internal']}\n  login ci-bot\n  password {pw}")
        )
    elif kind == "pgpass":
        pw = g.url_password()
        d.P("password_config", pw, ".pgpass line")
        d.w("`~/.pgpass` (mode 0600):", "", fence("text", f"pg.{co['internal']}:5432:{d.svc.replace('-', '_')}:reporting:{pw}"))
    elif kind == "mycnf":
        pw = g.password()
        d.P("password_config", pw, "my.cnf password=")
        d.w(
            "`~/.my.cnf` for the backup user:",
            "",
            fence("ini", f"[client]\nuser=backup\npassword={pw}\nhost=mysql-primary.{co['internal']}"),
        )
    elif kind == "gcp-sa":
        d.w("The key file the exporter uses (`exporter-sa.json`):", "", gcp_sa_json(d))
    elif kind == "ssh":
        d.w(
            "`~/.ssh/id_deploy` on the build agent (the public half is in the repo's deploy keys):",
            "",
            fence("text", pem_block(d, note="ssh key file")),
        )
    else:
        t = g.github()
        d.P("github_token", t, ".git-credentials URL")
        d.w("`~/.git-credentials` on the runner:", "", fence("text", f"https://{co['short']}-bot:{t}@github.com"))
    d.w("", neg_misc(d), "", prose_negatives(d))


def compose(c: Corpus) -> None:
    d = c.doc("docker-compose", c.g.pick(["local-stack", "staging", "monitoring"]))
    g, co = d.g, d.co
    pgpw, adminpw, rpw = g.password(), g.password(), g.url_password()
    d.P("password_config", pgpw, "compose POSTGRES_PASSWORD")
    d.P("password_config", adminpw, "compose PGADMIN_DEFAULT_PASSWORD")
    d.P("password_config", rpw, "redis --requirepass")
    its = pick_items(d, g.int(2, 4))
    ver = f"15.{g.int(2, 6)}-alpine"
    d.N("version", f"postgres:{ver}")
    d.w(
        f"# {d.svc} local stack",
        "",
        "`docker compose up -d` brings up everything the service needs. " + filler(d),
        "",
        fence(
            "yaml",
            f'''services:
  db:
    image: postgres:{ver}
    environment:
      POSTGRES_USER: app
      POSTGRES_PASSWORD: {pgpw}
    volumes: ["pgdata:/var/lib/postgresql/data"]
  pgadmin:
    image: dpage/pgadmin4:8
    environment:
      PGADMIN_DEFAULT_EMAIL: {d.I("role_email", "admin@" + co["domain"])}
      PGADMIN_DEFAULT_PASSWORD: {adminpw}
  cache:
    image: redis:7
    command: ["redis-server", "--requirepass", "{rpw}"]
  app:
    build: .
    environment:
{render(d, its, g.pick(["yaml", "yaml_bare"]), "      ")}
  worker:
    build: .
    environment:
      - DB_PASSWORD=${{DB_PASSWORD}}
      - QUEUE_URL=${{QUEUE_URL}}
volumes:
  pgdata: {{}}''',
        ),
        "",
        "The worker reads `${DB_PASSWORD}` from your shell, so `export` it first.",
        "",
        neg_misc(d),
    )
    d.N("placeholder", "${DB_PASSWORD}")


def k8s(c: Corpus) -> None:
    kind = c.cycle("k8s", ["secret", "secret", "deployment", "kubeconfig"])
    d = c.doc("k8s", kind)
    g, co = d.g, d.co
    uid = g.uuid()
    if kind == "secret":
        its = pick_items(d, g.int(2, 3))
        its = [i for i in its if i[2]]
        d.w(
            f"# Kubernetes secret for {d.svc}",
            "",
            "Applied by hand during the migration; it should move to External Secrets.",
            "",
            fence(
                "yaml",
                f"""apiVersion: v1
kind: Secret
metadata:
  name: {d.svc}-env
  namespace: {d.svc}
  uid: {uid}
type: Opaque
data:
{render(d, its, "k8s_data", "  ")}""",
            ),
            "",
        )
        if g.chance(0.6):
            its2 = [i for i in items(d, g.pick(["smtp", "db_split", "slack", "generic"]))]
            d.w(
                "and the second one uses `stringData`:",
                "",
                fence(
                    "yaml",
                    f"""apiVersion: v1
kind: Secret
metadata:
  name: {d.svc}-extra
stringData:
{render(d, its2, "yaml", "  ")}""",
                ),
            )
    elif kind == "deployment":
        pw = g.password()
        d.P("password_config", pw, "k8s env value:")
        d.w(
            f"# {d.svc} deployment",
            "",
            fence(
                "yaml",
                f'''apiVersion: apps/v1
kind: Deployment
metadata:
  name: {d.svc}
  uid: {uid}
spec:
  template:
    spec:
      containers:
        - name: app
          image: ghcr.io/{co["short"]}/{d.svc}@sha256:{g.sha(64)}
          env:
            - name: DB_PASSWORD
              valueFrom:
                secretKeyRef:
                  name: {d.svc}-db
                  key: password
            - name: LEGACY_ADMIN_PASSWORD
              value: "{pw}"
            - name: API_BASE
              value: "https://api.{co["domain"]}/api/v2/"''',
            ),
        )
        d.N("version", "/api/v2/")
        d.N("code_identifier", "secretKeyRef")
    else:
        tok = g.jwt(f"system:serviceaccount:{d.svc}:deployer", "kubernetes/serviceaccount", "RS256")
        d.P("jwt", tok, "kubeconfig token")
        pem, lines = g.pem(g.pick(["rsa", "ec"]))
        b64 = base64.b64encode((pem + "\n").encode()).decode()
        d.P("private_key_b64", b64, "kubeconfig client-key-data", [b64[40:80], b64[len(b64) // 2 : len(b64) // 2 + 40], b64[-60:-20]])
        ca = base64.b64encode(g.cert()[0].encode()).decode()
        d.N("public_cert_b64", ca[100:160])
        d.w(
            f"# kubeconfig for the {d.svc} deployer",
            "",
            "Generated for the CI runner. The cluster CA is public; the rest is not.",
            "",
            fence(
                "yaml",
                f"""apiVersion: v1
kind: Config
clusters:
  - name: prod-{d.region}
    cluster:
      server: https://{d.N("url", g.sha(32).upper() + ".gr7." + d.region + ".eks.amazonaws.com")}
      certificate-authority-data: {ca}
users:
  - name: deployer
    user:
      token: {tok}
  - name: admin-cert
    user:
      client-certificate-data: {ca}
      client-key-data: {b64}""",
            ),
        )
    if kind != "kubeconfig":
        d.N("uuid", uid)
    d.w("", neg_misc(d))


def ci(c: Corpus) -> None:
    kind = c.cycle("ci", ["github-actions", "gitlab-ci", "jenkins", "circleci"])
    d = c.doc("ci", kind)
    g, co = d.g, d.co
    d.w(f"# CI: {d.svc} ({kind})", "", filler(d), "")
    if kind == "github-actions":
        its = items(d, g.pick(["docker", "npm", "pypi", "aws"]))
        for n in ["${{ secrets.NPM_TOKEN }}", "${{ secrets.GITHUB_TOKEN }}"]:
            d.N("placeholder", n)
        wh, sec = g.slack_webhook()
        d.P("slack_webhook", sec, "webhook URL in workflow")
        d.w(
            fence(
                "yaml",
                f"""name: release
on:
  push:
    tags: ["v*"]
jobs:
  publish:
    runs-on: ubuntu-22.04
    env:
      NODE_AUTH_TOKEN: ${{{{ secrets.NPM_TOKEN }}}}
      GH_TOKEN: ${{{{ secrets.GITHUB_TOKEN }}}}
      # TODO move these to repository secrets
{render(d, its, "yaml", "      ")}
    steps:
      - uses: actions/checkout@{g.sha()}
      - run: npm ci && npm publish
      - name: notify
        run: curl -X POST -H 'Content-type: application/json' --data '{{"text":"released"}}' {wh}""",
            )
        )
    elif kind == "gitlab-ci":
        its = items(d, "aws") + items(d, g.pick(["gitlab", "sendgrid", "hf"]))
        key = pem_block(d, note="YAML block scalar in .gitlab-ci.yml", indent="    ")
        d.w(
            fence(
                "yaml",
                f"""variables:
{render(d, its, "yaml", "  ")}
  DOCKER_DRIVER: overlay2
  SSH_PRIVATE_KEY: |
{key}

deploy:
  stage: deploy
  image: registry.gitlab.com/gitlab-org/cloud-deploy/aws-base:latest
  script:
    - aws s3 sync dist/ s3://{co["short"]}-static-prod/ --delete
  only: [main]""",
            )
        )
    elif kind == "jenkins":
        pw = g.password()
        d.P("basic_auth_password", pw, "curl -u user:pass")
        d.N("code_identifier", "withCredentials")
        d.w(
            fence(
                "groovy",
                f"""pipeline {{
  agent any
  stages {{
    stage('Deploy') {{
      steps {{
        withCredentials([string(credentialsId: 'nexus-token', variable: 'NEXUS_TOKEN')]) {{
          sh 'curl -u deployer:{pw} --upload-file build/{d.svc}.jar https://nexus.{co["internal"]}/repository/releases/'
        }}
      }}
    }}
  }}
}}""",
            )
        )
    else:
        its = items(d, g.pick(["anthropic", "openai", "stripe", "github"]))
        d.w(
            fence(
                "yaml",
                f"""version: 2.1
jobs:
  test:
    docker:
      - image: cimg/python:3.11
        environment:
{render(d, its, "yaml_bare", "          ")}
    steps:
      - checkout
      - run: pytest -q""",
            )
        )
    d.w("", neg_misc(d), "", neg_misc(d))


def incident(c: Corpus) -> None:
    d = c.doc("incident", c.g.pick(["leaked-key", "outage", "data-exposure", "auth-failure"]))
    g, co = d.g, d.co
    inc = d.N("order_number", f"INC{g.digits(7)}")
    d.w(
        f"# Post-incident review {inc}: {g.pick(['credential exposure', 'checkout outage', 'login failures', 'misrouted e-mails'])}",
        "",
        f"Status: resolved. Severity: SEV-{g.int(1, 3)}. Date: {d.N('date', g.date())}.",
        "",
        "## Summary",
        "",
    )
    kind = c.cycle("incident", [0, 1, 2, 3, 4])
    if kind == 4:
        d.w(
            "A developer committed the signing key of the SAML IdP to a public fork. The file as committed:",
            "",
            fence("text", pem_block(d, note="incident: committed key file")),
            "",
        )
    elif kind == 0:
        k = g.stripe()
        d.P("stripe_key", k, "incident prose")
        d.w(
            f"A live Stripe key (`{k}`) was pasted into a public gist while debugging a webhook. GitHub secret scanning notified "
            "us within minutes and the key was rolled.",
            "",
        )
    elif kind == 1:
        k, s = g.aws_key_id(), g.aws_secret()
        d.P("aws_access_key_id", k, "incident prose")
        d.P("aws_secret_access_key", s, "incident log")
        d.w(
            f"The access key {k} belonging to the `{d.svc}-ci` IAM user was committed in a test fixture. CloudTrail shows "
            f"`ListBuckets` calls from an unknown ASN shortly after. The fixture contained:",
            "",
            fence("text", f"aws_access_key_id={k}\naws_secret_access_key={s}"),
            "",
        )
    elif kind == 2:
        tok = g.jwt(g.uuid(), f"https://auth.{co['domain']}")
        d.P("jwt", tok, "log excerpt Bearer")
        d.w(
            "The gateway logged full request headers at DEBUG for six hours. Example line:",
            "",
            fence(
                "text",
                f"{d.N('date', g.date())} DEBUG gateway req_id={d.N('uuid', g.uuid())} GET /api/v1/orders Authorization: Bearer {tok}",
            ),
            "",
        )
        d.N("version", "/api/v1/orders")
    else:
        t = g.pick([g.slack_user, g.slack_bot])()
        d.P("slack_token", t, "incident prose")
        d.w(f"A Slack user token ({t}) was found in a screenshot attached to a support ticket.", "")
    d.w("## Timeline", "", "| Time (UTC) | Event |", "|---|---|")
    for _ in range(3):
        d.w(f"| {g.int(0, 23):02d}:{g.int(0, 59):02d} | {g.pick(EVENTS)} |")
    d.w("", "## Affected customers", "", "| Customer | Contact | Phone |", "|---|---|---|")
    for _ in range(g.int(2, 4)):
        f, ln = g.person()
        d.I("person_name", f"{f} {ln}")
        d.w(f"| {f} {ln} | {d.P('email', g.personal_email(f, ln), 'table')} | {d.phone('table')} |")
    sha = g.sha()
    d.w(
        "",
        "## Follow-ups",
        "",
        f"- Fix merged in {d.N('git_sha', sha)}.",
        f"- {prose_negatives(d)}",
        f"- {neg_misc(d)}",
        f"- Customers' cards were not exposed; the only card data in the logs was masked, e.g. "
        f"`{d.N('masked_value', '**** **** **** ' + g.digits(4))}`.",
    )


def hr_form(c: Corpus) -> None:
    country = c.cycle("hr-country", ["US", "UK", "DE", "FR", "ES", "IT", "NL", "BE", "PL", "SE", "FI", "CA", "IN"])
    d = c.doc("hr-form", f"new-hire-{country.lower()}")
    g = d.g
    f, ln = g.person()
    d.I("person_name", f"{f} {ln}")
    dob = d.I("date_of_birth", f"{g.int(1, 28):02d}/{g.int(1, 12):02d}/19{g.int(60, 99)}")
    addr = d.I(
        "address",
        f"{g.int(1, 220)} {g.pick(STREETS)}",
    )
    idrow = {
        "US": ("Social Security Number", g.ssn(), "us_ssn"),
        "UK": ("National Insurance number", g.nino(), "uk_nino"),
        "DE": ("Steuerliche Identifikationsnummer", g.de_idnr(), "de_tax_id"),
        "FR": ("N° de sécurité sociale (NIR)", g.fr_nir(), "fr_nir"),
        "ES": ("DNI / NIE", g.es_dni() if g.chance(0.5) else g.es_nie(), "es_dni"),
        "IT": ("Codice fiscale", g.it_cf(f, ln), "it_codice_fiscale"),
        "NL": ("BSN", g.nl_bsn(), "nl_bsn"),
        "BE": ("Rijksregisternummer", g.be_nn(), "be_national_number"),
        "PL": ("PESEL", g.pl_pesel(), "pl_pesel"),
        "SE": ("Personnummer", g.se_pnr(), "se_personnummer"),
        "FI": ("Henkilötunnus", g.fi_hetu(), "fi_hetu"),
        "CA": ("Social Insurance Number", g.ca_sin(), "ca_sin"),
        "IN": ("Aadhaar", g.aadhaar(), "in_aadhaar"),
    }[country]
    label, nid, typ = idrow
    if typ == "es_dni" and nid[0] in "XYZ":
        typ = "es_nie"
    unicode_variant = g.chance(0.2)
    iban, _ = g.iban({"US": "DE", "UK": "GB", "CA": "IE", "IN": "GB", "SE": "DE", "FI": "DE"}.get(country, country), printed=True)
    if unicode_variant:
        iban = iban.replace(" ", "\u00a0")  # pasted from a word processor
    d.P(typ, nid, "HR form field")
    d.P("iban", iban, "HR form, NBSP-separated" if unicode_variant else "HR form")
    emp = d.N("order_number", f"EMP-{g.digits(5, True)}")
    d.w(
        f"# New starter form - {d.co['name']} ({country})",
        "",
        "Please complete and return to People Ops before your start date.",
        "",
        "| Field | Value |",
        "|---|---|",
        f"| Full name | {f} {ln} |",
        f"| Employee number | {emp} |",
        f"| Date of birth | {dob} |",
        f"| Home address | {addr} |",
        f"| Personal e-mail | {d.P('email', g.personal_email(f, ln), 'HR form')} |",
        f"| Mobile | {d.phone('HR form', us=country == 'US', nbsp=unicode_variant)} |",
        f"| {label} | {nid} |",
        f"| Salary account (IBAN) | {iban} |",
        f"| Start date | {d.N('date', g.date())} |",
        "",
    )
    ef, eln = g.person()
    d.I("person_name", f"{ef} {eln}")
    d.w("## Emergency contact", "", f"{ef} {eln} ({g.pick(['spouse', 'partner', 'mother', 'father', 'sibling'])}), {d.phone('prose')}.", "")
    if g.chance(0.4):
        card, brand = g.card()
        d.P("credit_card", card, f"HR form corporate card ({brand})")
        d.w(f"Corporate card issued: {card}, expiry {g.int(1, 12):02d}/{g.int(26, 30)}. Keep receipts for anything over EUR 50.", "")
    d.w("Reference books for the onboarding course: " + ", ".join(d.N("isbn", "ISBN " + g.isbn13()) for _ in range(2)) + ".")


def support_ticket(c: Corpus) -> None:
    d = c.doc("support-ticket", c.g.pick(["double-charge", "refund", "api-401", "account-locked", "delivery"]))
    g, co = d.g, d.co
    f, ln = g.person()
    d.I("person_name", f"{f} {ln}")
    em = d.P("email", g.personal_email(f, ln), "ticket requester")
    tid = d.N("order_number", f"#{g.digits(5, True)}")
    order = d.N("order_number", g.order_no())
    d.w(
        f"# Ticket {tid}: {g.pick(['Charged twice', 'Refund request', 'API returns 401', 'Locked out', 'Parcel not delivered'])}",
        "",
        f"Requester: {f} {ln} <{em}>",
        f"Channel: {g.pick(['e-mail', 'web form', 'chat'])}",
        f"Order: {order}",
        "",
        "## Customer",
        "",
    )
    kind = c.cycle("ticket", [0, 1, 2, 3, 4])
    if kind == 4:
        typ = c.cycle("national-id", NATIONAL_IDS)
        nid = national_id(d, typ, f, ln)
        d.P(typ, nid, "KYC ticket")
        d.w(f"Your verification keeps failing. I typed my {ID_LABEL[typ]} exactly as on the card: {nid}. What else do you need?", "")
    elif kind == 0:
        card, brand = g.card()
        note = f"customer message ({brand})"
        if g.chance(0.25):  # typed with a Japanese IME: full-width digits, NFKC folds them
            card, note = card.translate({ord(ch): 0xFF10 + int(ch) for ch in "0123456789"}), note + ", full-width digits"
        d.P("credit_card", card, note)
        d.w(
            f"Hi, I was charged twice for {order}. The card is {card}, exp {g.int(1, 12):02d}/{g.int(26, 29)}. Please refund one "
            f"of them. You can call me on {d.phone('customer message')}.",
            "",
        )
    elif kind == 1:
        iban, _ = g.iban()
        d.P("iban", iban, "refund IBAN")
        d.w(
            f"I returned the item ({d.N('numeric_id', '1Z' + g.s('ABCDEFGHJKLMNPRSTUVWXYZ0123456789', 6) + g.digits(10))}). "
            f"Please refund to my account {iban} instead of the card.",
            "",
        )
    elif kind == 2:
        k = g.pick([g.stripe, g.sendgrid, g.openai])()
        typ = "stripe_key" if k.startswith(("sk_", "rk_")) else "sendgrid_key" if k.startswith("SG.") else "openai_key"
        d.P(typ, k, "customer pasted key")
        d.w(
            "Your API keeps answering 401 to my integration. Here's exactly what I send:",
            "",
            fence("bash", f'curl https://api.{co["domain"]}/api/v1/charges -H "Authorization: Bearer {k}"'),
            "",
        )
        d.N("version", "/api/v1/charges")
    else:
        pw = g.password()
        d.P("password_prose", pw, "customer gave password")
        d.w(f"I'm locked out. My password is {pw} and it worked yesterday! Username {em}.", "")
    d.w(
        "## Agent",
        "",
        f"Thanks for reaching out. {g.pick(['I have raised a refund', 'I have reset the lockout', 'I have passed this to billing'])}. "
        "Please never send card numbers or passwords by e-mail; we will never ask for them.",
        "",
        f"Internal note: {d.N('masked_value', 'card on file ends in ' + g.digits(4))}. {neg_misc(d)}",
        "",
        signature(d, *d.person()[:2]),
    )


def meeting_notes(c: Corpus) -> None:
    d = c.doc("meeting-notes", c.g.pick(["platform-sync", "security-weekly", "offsite-planning", "retro"]))
    g = d.g
    people = [d.person() for _ in range(g.int(3, 5))]
    d.w(
        f"# {g.pick(['Platform sync', 'Security weekly', 'Offsite planning', 'Sprint retro'])} - {d.N('date', g.date())}",
        "",
        "Attendees: " + ", ".join(f"{p[0]} {p[1]}" for p in people),
        "",
        "## Notes",
        "",
        f"- {filler(d)}",
    )
    kind = g.sample(range(6), 3)
    for k in kind:
        if k == 0:
            t = g.gitlab()
            d.P("gitlab_token", t, "meeting notes action")
            d.w(f"- {people[0][0]} shared a personal access token in the doc ({t}) - rotate it and use a project token instead.")
        elif k == 1:
            d.w(f"- {prose_password(d)}")
        elif k == 2:
            d.w(f"- Bridge for the vendor call: {d.phone('dial-in')}, organiser {d.mail(people[1][0], people[1][1], 'notes')}.")
        elif k == 3:
            t = g.hf()
            d.P("huggingface_token", t, "meeting notes")
            d.w(f"- The eval job is gated on the HF model; read token for now is {t} (owner: {people[-1][0]}).")
        elif k == 4:
            d.w(f"- {prose_negatives(d)}")
        else:
            d.w(f"- {neg_misc(d)}")
    d.w("", "## Action items", "")
    for p in people[:3]:
        d.w(f"- [ ] {p[0]}: {g.pick(ACTIONS + ['close PAY-' + g.digits(4)])}")


def readme(c: Corpus) -> None:
    d = c.doc("readme", c.g.pick(["troubleshooting", "getting-started", "faq"]))
    g, co = d.g, d.co
    d.w(
        f"# {d.svc}",
        "",
        f"Internal service of {co['name']}. Requires Python 3.11 and Docker.",
        "",
        "## Troubleshooting",
        "",
        "### `401 Unauthorized` from the registry",
        "",
        "Make sure your token is exported: `export GITHUB_TOKEN=<your-token>`. For example, this is what a working setup looks like:",
        "",
    )
    d.N("placeholder", "<your-token>")
    kind = c.cycle("readme", [0, 1, 2, 3, 4])
    if kind == 0:
        t = g.github_fine()
        d.P("github_fine_grained_pat", t, "README example")
        d.w(fence("bash", f"export GITHUB_TOKEN={t}\ngh auth status"))
    elif kind == 1:
        pw = g.url_password()
        d.P("basic_auth_password", pw, "pip index-url userinfo")
        d.w(fence("bash", f"pip install --index-url https://ci-reader:{pw}@pypi.{co['internal']}/simple/ {d.svc}-client"))
    elif kind == 2:
        t = g.hf()
        d.P("huggingface_token", t, "huggingface-cli --token")
        d.w(fence("bash", f"huggingface-cli login --token {t}"))
    elif kind == 3:
        t = g.anthropic()
        d.P("anthropic_key", t, "python client api_key=")
        d.w(fence("python", f'import anthropic\nclient = anthropic.Anthropic(api_key="{t}")'))
    else:
        t = g.npm()
        d.P("npm_token", t, "npm config set")
        d.w(fence("bash", f"npm config set //registry.npmjs.org/:_authToken {t}"))
    d.w("", "### Database connection refused", "", "Check the DATABASE_URL variable; the local default is:", "")
    kind2 = g.pick(["mysql", "mongo", "amqp", "db"])
    d.w(fence("bash", render(d, items(d, kind2), "env")), "")
    d.N("env_var_name", "the DATABASE_URL variable")
    d.w(
        "### Verifying downloads",
        "",
        "Compare against the published checksums:",
        "",
        checksum_list(d, g.int(2, 4)),
        "",
        negatives_code(d) if g.chance(0.5) else neg_misc(d),
        "",
        "### Versions",
        "",
        f"The API is served under `{d.N('version', '/api/v1')}`; `{d.N('version', g.version())}` is the last release "
        "with the old auth flow.",
    )


def wiki(c: Corpus) -> None:
    d = c.doc("wiki", c.g.pick(["shared-accounts", "vendor-keys", "staging-access", "team-home", "tools"]))
    g, co = d.g, d.co
    d.w(f"# {g.pick(['Shared accounts', 'Vendor integrations', 'Staging access', 'Team home', 'Tools we use'])}", "", filler(d, 2), "")
    d.w("| Service | URL | Username | Password / key |", "|---|---|---|---|")
    for _ in range(g.int(2, 4)):
        kind = g.int(0, 5)
        svc = g.pick(["Grafana", "Jira service account", "Sentry", "PagerDuty", "Datadog", "Bitbucket", "Cloudflare", "Zendesk"])
        if kind <= 2:
            pw = g.password()
            d.P("password_config", pw, "wiki table cell")
            d.w(f"| {svc} | https://{svc.split()[0].lower()}.{co['internal']} | admin | {pw} |")
        elif kind == 3:
            t = g.twilio_api_key()
            d.P("twilio_api_key", t, "wiki table cell")
            d.w(f"| Twilio | https://console.twilio.com | {d.I('twilio_account_sid', g.twilio_sid())} | {t} |")
        elif kind == 4:
            t = g.sendgrid()
            d.P("sendgrid_key", t, "wiki table cell")
            d.w(f"| SendGrid | https://app.sendgrid.com | apikey | {t} |")
        else:
            t = g.mailgun()
            d.P("mailgun_key", t, "wiki table cell")
            d.w(f"| Mailgun | https://app.mailgun.com | api | {t} |")
    d.w("", "## Staging", "")
    pw = g.url_password()
    d.P("basic_auth_password", pw, "basic-auth URL")
    d.w(f"Staging sits behind basic auth: https://preview:{pw}@staging.{co['domain']}/ (the browser will remember it).", "")
    if g.chance(0.5):
        sig = g.azure_sas_sig()
        d.P("azure_sas_signature", sig, "SAS URL sig=")
        acct = f"{co['short']}stagingassets"
        d.w(
            f"Test fixtures are in blob storage; this read-only SAS URL is valid until the end of the year: "
            f"https://{acct}.blob.core.windows.net/fixtures?sv=2022-11-02&ss=b&srt=co&sp=rl&se=2025-12-31T23:59:59Z&"
            f"st=2024-01-01T00:00:00Z&spr=https&sig={sig}",
            "",
        )
    if g.chance(0.5):
        pub = g.ssh_pub(f"ops@{co['short']}")
        d.N("public_key", pub.split()[1])
        d.w("Add this public key to `authorized_keys` on the staging hosts:", "", fence("text", pub), "")
    d.w(
        "## Reading list",
        "",
        "- " + d.N("isbn", "ISBN " + g.isbn13()) + " (Site Reliability Engineering)",
        "- " + d.N("isbn", "ISBN " + g.isbn10()) + " (an older one)",
        "",
        prose_negatives(d),
        "",
        neg_misc(d),
    )


def finance(c: Corpus) -> None:
    d = c.doc("finance", c.cycle("finance", ["vendor-bank-details", "corporate-cards", "payroll-export", "expenses"]))
    g = d.g
    d.w(
        f"# {g.pick(['Vendor bank details', 'Corporate cards', 'Payroll export (Q2)', 'Expense review'])}",
        "",
        "Finance-only. Do not share outside the team.",
        "",
        "| Name | Country | IBAN | Card | Invoice |",
        "|---|---|---|---|---|",
    )
    for _ in range(g.int(3, 5)):
        f, ln = g.person()
        d.I("person_name", f"{f} {ln}")
        iban, cc = g.iban()
        d.P("iban", iban, f"finance table ({cc})")
        card, brand = g.card()
        d.P("credit_card", card, f"finance table ({brand})")
        d.w(f"| {f} {ln} | {cc} | {iban} | {card} | {d.N('order_number', g.order_no())} |")
    d.w("", f"Totals were reconciled on {d.N('date', g.date())}. Amounts in EUR: 12,480.00; 3,915.50; 88,200.00.", "")
    if g.chance(0.6):
        iban, cc = g.iban(printed=False)
        d.P("iban", iban, "prose, electronic format")
        d.w(
            f"Please pay the outstanding invoice {d.N('order_number', g.order_no())} to {iban} (BIC {g.pick(BICS)}).",
            "",
        )
    if "payroll" in d.name:
        d.w("## Payroll identifiers", "", "| Employee | National id | Tax class |", "|---|---|---|")
        for _ in range(10):
            f, ln = g.person()
            d.I("person_name", f"{f} {ln}")
            typ = c.cycle("national-id", NATIONAL_IDS)
            d.w(f"| {f} {ln} | {d.P(typ, national_id(d, typ, f, ln), 'payroll table')} | {g.int(1, 6)} |")
        d.w("")
    if g.chance(0.5):
        ssn = g.ssn()
        d.P("us_ssn", ssn, "payroll note")
        d.w(f"W-9 received for the contractor (SSN {ssn}); 1099 goes out in January.", "")
    d.w(neg_misc(d))


def api_cookbook(c: Corpus) -> None:
    d = c.doc("api-cookbook", c.g.pick(["internal-api", "partner-api", "webhooks"]))
    g, co = d.g, d.co
    d.w(f"# {d.svc} API cookbook", "", "Copy-paste examples against production. Replace the token with yours.", "")
    tok = g.opaque_token(g.pick([32, 40, 64]))
    d.P("bearer_token", tok, "curl Authorization: Bearer")
    d.w(
        "## List orders",
        "",
        fence("bash", f'curl -s https://api.{co["domain"]}/api/v1/orders?limit=50 \\\n  -H "Authorization: Bearer {tok}"'),
        "",
    )
    d.N("version", "/api/v1/orders")
    user, pw = "svc-" + d.svc, g.password("urlsafe") if g.chance(0.5) else g.url_password()
    basic = base64.b64encode(f"{user}:{pw}".encode()).decode()
    d.P("basic_auth_b64", basic, "Authorization: Basic")
    d.w(
        "## Legacy endpoints (basic auth)",
        "",
        fence("http", f"GET /v0/reports/daily HTTP/1.1\nHost: legacy.{co['internal']}\nAuthorization: Basic {basic}"),
        "",
    )
    kind = c.cycle("api", [0, 1, 2, 3, 4])
    if kind == 0:
        sid, tokn = d.I("twilio_account_sid", g.twilio_sid()), g.s("0123456789abcdef", 32)
        d.I("phone_fictional", "+14155550100")
        d.P("twilio_auth_token", tokn, "curl -u SID:token")
        d.w(
            "## Send an SMS",
            "",
            fence(
                "bash",
                f"curl -X POST https://api.twilio.com/2010-04-01/Accounts/{sid}/Messages.json \\\n"
                f"  --data-urlencode 'To=+14155550100' -d 'From={co['short'].upper()}' -u {sid}:{tokn}",
            ),
        )
    elif kind == 1:
        k = g.sendgrid()
        d.P("sendgrid_key", k, "curl Bearer SG.")
        d.w(
            "## Send a test e-mail",
            "",
            fence(
                "bash",
                f'curl https://api.sendgrid.com/v3/mail/send -H "Authorization: Bearer {k}" '
                "-H 'Content-Type: application/json' -d @mail.json",
            ),
        )
    elif kind == 2:
        k = g.anthropic()
        d.P("anthropic_key", k, "curl x-api-key")
        d.w(
            "## Summaries",
            "",
            fence(
                "bash", f'curl https://api.anthropic.com/v1/messages -H "x-api-key: {k}" -H "anthropic-version: 2023-06-01" -d @req.json'
            ),
        )
        d.N("date", "2023-06-01")
    elif kind == 3:
        k = g.opaque_token(32)
        d.P("generic_api_key", k, "X-API-Key header")
        d.w("## Partner feed", "", fence("bash", f"curl -H 'X-API-Key: {k}' https://partner.{co['domain']}/feed.json"))
    else:
        d.w("## Service account (BigQuery export)", "", gcp_sa_json(d))
    d.w("", "Prefer `Authorization: Bearer $TOKEN` in scripts so nothing lands in shell history.", "", neg_misc(d))
    d.N("placeholder", "Bearer $TOKEN")


def gcp_sa_json(d: Doc) -> str:
    g, co = d.g, d.co
    sa_email = f"{d.svc}@{co['short']}-prod-{g.digits(4)}.iam.gserviceaccount.com"
    d.I("service_account_email", sa_email)
    pem, lines = g.pem("pkcs8")
    esc = pem.replace("\n", "\\n") + "\\n"
    body = [ln for ln in lines if len(ln) >= 40]
    d.P("gcp_service_account_key", esc, "service-account JSON private_key", [body[0], body[len(body) // 2], body[-1]])
    return fence(
        "json",
        f'''{{
  "type": "service_account",
  "project_id": "{co["short"]}-prod",
  "private_key_id": "{d.I("key_id", g.sha(40))}",
  "private_key": "{esc}",
  "client_email": "{sa_email}",
  "client_id": "{d.I("numeric_id", g.digits(21, True))}",
  "auth_uri": "https://accounts.google.com/o/oauth2/auth",
  "token_uri": "https://oauth2.googleapis.com/token"
}}''',
    )


GENRES = [
    (runbook, 12),
    (onboarding_email, 9),
    (app_config, 10),
    (dotenv, 9),
    (config_formats, 14),
    (compose, 8),
    (k8s, 8),
    (ci, 8),
    (incident, 10),
    (hr_form, 13),
    (support_ticket, 11),
    (meeting_notes, 9),
    (readme, 10),
    (wiki, 12),
    (finance, 8),
    (api_cookbook, 10),
]


def build(seed: int = SEED) -> Corpus:
    c = Corpus(seed)
    for fn, n in GENRES:
        for _ in range(n):
            fn(c)
    return c


def write(out: Path, seed: int = SEED) -> dict:
    c = build(seed)
    out.mkdir(parents=True, exist_ok=True)
    texts = {d.name: d.text() for d in c.docs}
    for entry in c.planted + c.negatives:
        t = texts[entry["doc"]]
        assert entry["value"] in t, (entry, "not in document")
        for p in entry.get("probes", []):
            assert p in t, (entry["doc"], p)
    for name, t in texts.items():
        (out / name).write_text(t, encoding="utf-8")
    for i, e in enumerate(c.planted):
        e["id"] = i
    manifest = {
        "generator": "benchmarks/dlp/make_planted.py",
        "version": VERSION,
        "seed": seed,
        "documents": len(texts),
        "families": FAMILY,
        "planted": c.planted,
        "negatives": c.negatives,
        "incidental": c.incidental,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return manifest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="folder to write the corpus and manifest.json into")
    ap.add_argument("--seed", type=int, default=SEED)
    args = ap.parse_args()
    m = write(Path(args.out), args.seed)
    print(f"{m['documents']} documents, {len(m['planted'])} planted values, {len(m['negatives'])} hard negatives -> {args.out}")


if __name__ == "__main__":
    main()
