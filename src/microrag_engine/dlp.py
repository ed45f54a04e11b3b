"""Data-loss prevention: credentials and personal data in text, told apart from code.

In:  text (as written, or its canonical form - see ``guard``).
Out: ``Finding``s: a kind and a span, never the value.

Technical documentation is full of words that *name* secrets - ``secrets.compare_digest``,
``OAuth2PasswordRequestForm``, ``SECRET_KEY``, ``password: str`` - and of long tokens
that are not random - URLs, module paths, hashes. A detector that fires on the word or
on the length destroys the docs it protects (issue #16: 233 false findings in 30 pages).
So every detector here asks for a *value*:

* a credential shape with a distinctive prefix or structure (``AKIA…``, ``ghp_…``, PEM
  blocks, ``user:pass@`` in a URL), taken as it is;
* a number that validates: Luhn for cards, mod-97 for IBANs, each national scheme's
  check digits (python-stdnum), a few behind a keyword where the shape alone is common;
* a value in a credential's *context*: after ``password=`` / ``"token": `` / ``the wifi
  password is``, in a table column headed "Password", or a literal that names itself
  (``EXAMPLE-svc-backup-pw``) - and only when the value is a literal, not code (a call,
  an attribute, a type, a variable, a placeholder such as ``<token>`` or ``${DB_PASS}``);
* a random-looking token (three character classes, high entropy) that does not split
  into words the way identifiers and paths do.

Every pattern is RE2 (linear time: ``rx``).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from . import rx


@dataclass(frozen=True)
class Finding:
    """What was found and where. Never holds the value."""

    kind: str
    start: int
    end: int
    view: str = "plain"  # plain | base64 | hex | rot13


def _is_word(ch: str) -> bool:
    """Python's ``\\w`` for one character (RE2 has no lookahead, so boundaries are checked here)."""
    return ch.isalnum() or ch == "_"


# ---------------------------------------------------------------- shapes

class Shape(NamedTuple):
    """A secret recognised by its shape alone: a prefix or a structure no ordinary word has, so
    no context is needed. The finding is the span of ``group``. Every match holds one of
    ``needles`` (in the case-folded text when ``folded``), so the pattern runs only on a text
    that holds one (``shapes_in``): most pages hold none, and each RE2 run re-encodes the text."""

    kind: str
    pattern: Any  # a compiled RE2 pattern (``rx.compile``)
    group: int
    needles: tuple[str, ...]
    folded: bool


SHAPES = [
    Shape("aws_access_key", rx.compile(r"\b(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b"), 0, ("AKIA", "ASIA", "ABIA", "ACCA"), False),
    Shape("github_token", rx.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{40,})"), 0,
          ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"), False),
    Shape("gitlab_token", rx.compile(r"\bglpat-[A-Za-z0-9_-]{20,}"), 0, ("glpat-",), False),
    Shape("slack_token", rx.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"), 0, ("xox",), False),
    Shape("slack_webhook", rx.compile(r"https://hooks\.slack\.com/services/[A-Za-z0-9/_-]{20,}"), 0, ("hooks.slack.com",), False),
    Shape("stripe_key", rx.compile(r"\b(?:[sr]k|whsec)_(?:live_|test_)?[A-Za-z0-9]{16,}"), 0, ("sk_", "rk_", "whsec_"), False),
    Shape("api_key", rx.compile(r"\bsk-(?:proj-|ant-|svcacct-)?[A-Za-z0-9_-]{20,}"), 0, ("sk-",), False),  # OpenAI, Anthropic and alike
    Shape("google_api_key", rx.compile(r"\bAIza[0-9A-Za-z_-]{35}"), 0, ("AIza",), False),
    Shape("huggingface_token", rx.compile(r"\bhf_[A-Za-z0-9]{30,}"), 0, ("hf_",), False),
    Shape("npm_token", rx.compile(r"\bnpm_[A-Za-z0-9]{36}\b"), 0, ("npm_",), False),
    Shape("pypi_token", rx.compile(r"\bpypi-[A-Za-z0-9_-]{50,}"), 0, ("pypi-",), False),
    Shape("sendgrid_key", rx.compile(r"\bSG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}"), 0, ("SG.",), False),
    Shape("twilio_key", rx.compile(r"\bSK[0-9a-f]{32}\b"), 0, ("SK",), False),
    Shape("jwt", rx.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), 0, ("eyJ",), False),
    Shape("private_key", rx.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY( BLOCK)?-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY( BLOCK)?-----|$)"),
          0, ("-----BEGIN ",), False),
    Shape("azure_key", rx.compile(r"(?i)(?:AccountKey|SharedAccessKey)=([A-Za-z0-9+/]{20,}={0,2})"), 1,
          ("accountkey=", "sharedaccesskey="), True),
    Shape("azure_sas", rx.compile(r"[?&]sig=([A-Za-z0-9%+/]{20,}(?:%3D|=){0,2})"), 1, ("sig=",), False),
    # user:password@host in any URL scheme (postgres://, mongodb+srv://, redis://:pw@, https://)
    Shape("url_credentials", rx.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/@'\"`]*:([^\s@/'\"`]{3,})@[\w.-]"), 1, ("://",), False),
    Shape("bearer_token", rx.compile(r"(?i)\b(?:bearer|token)\s+([A-Za-z0-9_~+/.-]{16,}={0,2})"),  # + _looks_generated
          1, ("bearer", "token"), True),
    Shape("basic_auth", rx.compile(r"(?i)\bbasic\s+([A-Za-z0-9+/]{12,}={0,2})"), 1, ("basic",), True),  # "basic authentication" is not one
    Shape("email", rx.compile(r"\b[A-Za-z0-9._%+-]+@([A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,})\b"), 0, ("@",), False),
]
# A real key block has base64 in it; "... (private key in base64 encoding) ..." is a doc's placeholder.
_KEY_BODY = rx.compile(r"[A-Za-z0-9+/=]{40,}")
# Domains reserved for examples (RFC 2606/6761): an address there belongs to nobody.
_EXAMPLE_DOMAIN = rx.compile(r"(?i)(?:^|\.)(?:example\.(?:com|org|net)|example|test|invalid|localhost)$")
# Addresses reserved for documentation: IPv4 TEST-NET-1/2/3 (RFC 5737), IPv6 2001:db8::/32 (RFC 3849).
_DOC_ADDRESS = rx.compile(r"(?i)^(?:192\.0\.2\.|198\.51\.100\.|203\.0\.113\.|\[?2001:0?db8:)")
_HOST = rx.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)")


def _reserved_host(text: str, at: int) -> bool:
    """The host that starts at ``text[at]`` is reserved for examples or documentation: a credential
    for it opens nothing (``postgres://scott:tiger@db.example.com``, ``user:pw@192.0.2.7``)."""
    m = _HOST.match(text[at:at + 300])
    host = m.group(1).rstrip(".") if m else ""
    return bool(host) and (_EXAMPLE_DOMAIN.search(host) is not None or _DOC_ADDRESS.match(host) is not None)

# Phone numbers: "+" and a country code with 8-15 digits in groups, or the North American
# 3-3-4 with separators. A bare run of digits is an id, a count or a timestamp, not a phone.
_PHONE = [
    rx.compile(r"(?:^|[^\pL\pN_+])(\+\pN{1,3}(?:[ .-]?\(?\pN{1,4}\)?){2,5}[ .-]?\pN{2,4})"),
    rx.compile(r"(?:^|[^\pL\pN_+.-])(\(?\pN{3}\)?[ .-]\pN{3}[ .-]\pN{4})"),
    # national formats with a trunk 0: UK 07700 900123 / 020 7946 0958, France 06 12 34 56 78
    rx.compile(r"(?:^|[^\pL\pN_+.-])(0\pN{4}[ ]?\pN{6}|0\pN{2}[ ]\pN{4}[ ]\pN{4}|0[1-9](?:[ .]\pN{2}){4})"),
]


_MESSAGE_ID = rx.compile(r"^[0-9]{8,}[.$]")
_PAIR_AFTER = rx.compile(r"^ [0-9A-Fa-f]{2}(?:[ \t\n]|$)")  # a byte pair, not "af" of "after"
_PAIR_BEFORE = rx.compile(r"(?:^|\s)[0-9A-Fa-f]{2} $")


# Addresses published to be written to: role mailboxes (RFC 2142 and alike) and mailing lists.
_ROLE_MAILBOX = frozenset("""abuse admin announce bugs contact devel dev discuss git help hostmaster info list lists maintainers
    noc no-reply noreply postmaster press sales security support users webmaster""".split())
_LIST_DOMAIN = rx.compile(r"(?i)(?:^|\.)(?:googlegroups\.com|lists\.[a-z0-9.-]+|vger\.kernel\.org)$|^lists?\.")
# A line that credits people: code authorship and commit trailers name their authors on purpose.
_ATTRIBUTION = rx.compile(r"(?i)(?:^|[#*/;%!'\"`(-]\s*|\s)(?:authors?|maintainers?|contributors?|credits?|written by|copyright|\(c\)|"
                          r"©|signed-off-by|[a-z]+-by|co-authored-by)\s*:?\s|\bby [^<>@\n]{2,60}<$")


_NAME_ADDR_LINE = rx.compile(r"^[^<>@\n]{2,80}<[^<>\s]+@[^<>\s]+>[,.]?[ \t]*$")
# Local parts that stand for anyone: user@gmail.com in a config example
_ANYONE = frozenset("""user username you yourname your.name name someone somebody foo bar me email mail address
    first.last firstname.lastname john.doe jane.doe johndoe janedoe""".split())


def _published(text: str, local: str, domain: str, start: int) -> bool:
    """An address its owner publishes to be written to: a role mailbox or a mailing list, or
    one in a line that credits its author ("# Author: Ann <ann@uni.edu>", "Signed-off-by: ...")."""
    if local.lower().split("+")[0] in _ROLE_MAILBOX | _ANYONE or _LIST_DOMAIN.search(domain) or len(local) == 1:
        return True
    line_start = text.rfind("\n", max(0, start - 200), start) + 1
    if _ATTRIBUTION.search(text[line_start:start]):
        return True
    # A list of authors under its heading: "# Authors: A <a@x>" then "# B <b@y>" lines.
    for _ in range(12):
        if line_start == 0:
            return False
        prev_start = text.rfind("\n", max(0, line_start - 201), line_start - 1) + 1
        line = text[prev_start:line_start - 1]
        if _ATTRIBUTION.search(line):
            return True
        if not _NAME_ADDR_LINE.match(line):
            return False
        line_start = prev_start
    return False


def _is_address(text: str, f: Finding) -> bool:
    """An e-mail address someone has, not a URL's userinfo (git+ssh://git@host/...), an scp-style
    remote (git@github.com:org/repo.git), an address at a domain reserved for examples or one
    published to be written to (``_published``)."""
    local, domain = text[f.start:f.end].rsplit("@", 1)
    if _EXAMPLE_DOMAIN.search(domain) or _MESSAGE_ID.match(local) or _published(text, local, domain, f.start):
        return False  # reserved for examples; a Message-ID (<20030112190404.GE29873@host>) names a message
    word_start = max(text.rfind(c, max(0, f.start - 300), f.start) for c in " \t\n\"'`(<[") + 1
    if "://" in text[word_start:f.start] or text[word_start:f.start].endswith(":"):
        return False
    return text[f.end:f.end + 1] not in (":", "/")


def _fictional_phone(number: str) -> bool:
    """A North American number in the 555 exchange ((704) 555-1212, +1 202 555 0143): reserved
    for fiction and examples (555-0100..0199 by the NANPA; the rest is no one's line either)."""
    digits = "".join(c for c in number if c.isdigit())
    if number.lstrip().startswith("+"):
        if not digits.startswith("1"):
            return False
        digits = digits[1:]
    elif len(digits) == 11 and digits.startswith("1"):
        digits = digits[1:]
    return len(digits) == 10 and digits[3:6] == "555"


def _phones(text: str) -> list[Finding]:
    out = []
    for pattern in _PHONE:
        for m in pattern.finditer(text):
            end = m.end(1)
            digits = sum(ch.isdigit() for ch in m.group(1))
            glued = end < len(text) and (_is_word(text[end]) or (text[end] in "-." and text[end + 1:end + 2].isdigit()))
            # a hex dump's byte pairs ("00 01 02 03 04 05 06") are not a French number
            before = text[max(0, m.start(1) - 3):m.start(1)]
            glued = glued or _PAIR_AFTER.match(text[end:end + 4]) is not None or _PAIR_BEFORE.search(before) is not None
            if 10 <= digits <= 15 and not glued and not _fictional_phone(m.group(1)):
                out.append(Finding("phone", m.start(1), end))
    return out


# ---------------------------------------------------------------- numbers that validate


def _luhn_card(digits: str) -> bool:
    from stdnum import luhn

    # brand prefixes (Visa, Mastercard, Amex, Discover, JCB, Diners) and lengths 13-19
    return (13 <= len(digits) <= 19 and len(set(digits)) > 1 and luhn.is_valid(digits)
            and rx.compile(r"^(?:4|5[1-5]|2[2-7]|3[47]|6011|65|62|35|30[0-5]|36|38)").search(digits) is not None)


def _stdnum(module: str) -> Callable[[str], bool]:
    def valid(value: str) -> bool:
        import importlib

        try:
            return bool(importlib.import_module(f"stdnum.{module}").is_valid(value))
        except Exception:  # a validator that chokes on a shape is a "no"
            return False
    return valid


_CARD = rx.compile(r"(?:^|[^\pL\pN_.-])(\pN(?:[ -]?\pN){12,18})")
_IBAN = rx.compile(r"\b([A-Z]{2}\pN{2}(?: ?[A-Z0-9]){11,32})")
_SSN = rx.compile(r"(?:^|[^\pL\pN_.-])(\pN{3}-\pN{2}-\pN{4})")
# (kind, candidate, validator): the shape is distinctive enough with its check digits
_IDS = [
    ("national_id", rx.compile(r"\b([A-CEGHJ-PR-TW-Z][A-CEGHJ-NPR-TW-Z] ?\pN{2} ?\pN{2} ?\pN{2} ?[A-D])\b"), None),  # UK NINO
    ("national_id", rx.compile(r"\b(\pN{8}-?[A-Z])\b"), _stdnum("es.dni")),
    ("national_id", rx.compile(r"\b([XYZ]-?\pN{7}-?[A-Z])\b"), _stdnum("es.nie")),
    ("national_id", rx.compile(r"\b([A-Z]{6}\pN{2}[A-Z]\pN{2}[A-Z]\pN{3}[A-Z])\b"), _stdnum("it.codicefiscale")),
    ("national_id", rx.compile(r"\b(\pN{6}[-+A]\pN{3}[0-9A-Y])\b"), _stdnum("fi.hetu")),
    ("national_id", rx.compile(r"\b((?:\pN{2})?\pN{6}[-+]\pN{4})\b"), lambda v: _stdnum("se.personnummer")(v) or _stdnum("dk.cpr")(v)),
    ("national_id", rx.compile(r"\b(\pN{2}\.\pN{2}\.\pN{2}-\pN{3}\.\pN{2})\b"), _stdnum("be.nn")),
    ("national_id", rx.compile(r"\b(\pN{3}\.\pN{3}\.\pN{3}-\pN{2})\b"), _stdnum("br.cpf")),
    ("national_id", rx.compile(r"\b([12] ?\pN{2} ?\pN{2} ?[0-9AB]{2} ?\pN{3} ?\pN{3} ?\pN{2})\b"), _stdnum("fr.nir")),
]
_NINO_BAD = frozenset({"BG", "GB", "NK", "KN", "TN", "NT", "ZZ"})
# Numbers whose shape alone is common (9-12 digits): only after their own name on the line.
_ID_WORDS = rx.compile(r"(?i)\b(?:ssn|social security|social insurance|bsn|burgerservicenummer|pesel|steuer-?id|"
                       r"\w*identifikationsnummer|idnr|tax id|tax number|taxpayer id\w*|aadhaar|nhs|personal id|national id|"
                       r"id number|identity number|national insurance|ni number|nino|pps|personnummer|hetu)\b")
_ID_NUMBER = rx.compile(r"(?:^|[^\pL\pN_.-])(\pN[\pN ]{7,14}\pN)(?:$|[^\pL\pN_])")
_KEYED_IDS = [("us_ssn", _stdnum("us.ssn")), ("national_id", _stdnum("nl.bsn")), ("national_id", _stdnum("pl.pesel")),
              ("national_id", _stdnum("de.idnr")), ("national_id", _stdnum("ca.sin")), ("national_id", _stdnum("in_.aadhaar")),
              ("national_id", _stdnum("gb.nhs")), ("national_id", _stdnum("ie.pps"))]


def _numbers(text: str) -> list[Finding]:
    from stdnum import iban

    out = []
    for m in _CARD.finditer(text):
        digits = "".join(ch for ch in m.group(1) if ch.isdigit())
        end = m.end(1)
        if (end == len(text) or not text[end].isdigit()) and _luhn_card(digits):
            out.append(Finding("credit_card", m.start(1), end))
    for m in _IBAN.finditer(text):
        # the run may have swallowed a following code ("... 00 BIC"): the longest valid prefix wins
        raw = m.group(1)
        for cut in range(len(raw), 14, -1):
            if raw[cut - 1] != " " and iban.is_valid(raw[:cut]):
                out.append(Finding("iban", m.start(1), m.start(1) + cut))
                break
    for m in _SSN.finditer(text):
        end = m.end(1)
        if (end == len(text) or not text[end].isdigit()) and _stdnum("us.ssn")(m.group(1)):
            out.append(Finding("us_ssn", m.start(1), end))
    for kind, pattern, valid in _IDS:
        for m in pattern.finditer(text):
            value = m.group(1)
            if valid is None and value[:2] in _NINO_BAD:
                continue
            if valid is None or valid(value):
                out.append(Finding(kind, m.start(1), m.end(1)))
    for line_start, line in _lines(text):
        if not _ID_WORDS.search(line):
            continue
        for m in _ID_NUMBER.finditer(line):
            keyed = next((k for k, check in _KEYED_IDS if check(m.group(1))), None)
            if keyed:
                out.append(Finding(keyed, line_start + m.start(1), line_start + m.end(1)))
    return out


def _lines(text: str) -> list[tuple[int, str]]:
    out, start = [], 0
    for line in text.split("\n"):
        out.append((start, line))
        start += len(line) + 1
    return out


# ---------------------------------------------------------------- values in a credential's context

# The words that say "a credential follows", as a whole segment of the key: DB_PASSWORD,
# aws_secret_access_key, apiKey, client-secret, "the wifi password is". ("key" alone is
# every dict's key: only a qualified one counts.)
_CRED = r"(?:password|passwd|passphrase|pwd|pw|pass|secret|token|key|credentials?)"
_CRED_WORDS = frozenset("password passwd passphrase pwd pw pass secret secrets token credential credentials requirepass".split())
# glued names end in one: PGPASSWORD, dbpass, mytoken, clientsecret (not "bypass", "secretary", "tokenizer")
_CRED_ENDINGS = ("password", "passwd", "pwd", "secret", "token")
# a token for paging or retries is not a credential
_NOT_CRED_BEFORE = frozenset("next page continuation pagination cancellation sync idempotency marker resume".split())
# "key" is a credential only with one of these before it (api_key, AUTH_KEY, appKey) ...
_KEY_QUALIFIERS = frozenset("api access secret private signing account license master encryption client auth app "
                            "service shared preshared webhook consumer deploy ssh storage".split())
# ... and a name ending in one of these holds something *about* a credential, not the credential:
# token_uri, credentialsId, token_type, password_file, SECRET_NAME, password_length.
_ABOUT = frozenset("id ids name names file path url uri type length len header field env var ref policy min max "
                   "expiry expires ttl age prompt label help hint hash hashed format count prefix scheme mode kind source "
                   "provider endpoint version store method helper process expiration duration location dir pattern regex "
                   "chars size limit".split())
# key, optional closing quote, operator, value. Group 1: the key; 2: the operator; 3: the value.
# Operators: assignments, YAML/JSON colons, PHP's define('KEY', 'value'), and prose ("the wifi
# password is X", "the password for the NAS was reset to X").
_ASSIGN = rx.compile(
    r"(?i)\b((?:(?:api|access|secret|private|signing|shared|pre-shared|master|license|encryption|account)[ \t]+)?"
    r"[a-z0-9_.-]*?" + _CRED + r"[a-z0-9_.-]*)[\"'`]?[ \t]*"
    r"(=>|->|:=|=|:|,[ \t]*(?:[\"'])|[ \t]for[ \t][^\n:]{1,40}?:|[ \t](?:for[ \t][^\n]{1,40}?[ \t])?(?:is|was|are)"
    r"(?:[ \t]+(?:now|still|set|reset|changed|updated|rotated))?(?:[ \t]+to)?)[ \t]*"
    r"(\"[^\"\n]*\"|'[^'\n]*'|`[^`\n]*`|[^\s;\"'`]+)")
# A passphrase is words: "passphrase: correct horse battery staple" (to the end of the line, up to 8 words)
_PASSPHRASE = rx.compile(r"(?im)\bpassphrase[\"'`]?[ \t]*(?::|=|[ \t]is)[ \t]*"
                         r"((?:[a-z0-9!@#$%^&*.-]+[ \t]+){2,7}[a-z0-9!@#$%^&*.-]+)[ \t]*$")
_NOT_PASSPHRASE = frozenset("optional required none null empty unset set not the a an is must should can may".split())
# mysql -pSECRET (the password glued to the flag)
_MYSQL_P = rx.compile(r"\bmysql(?:dump|admin)?\b[^\n]*?[ \t]-p([^\s'\"]{4,})")
# A credential word, then a quoted literal with no operator: pass `C0b@lt!`, password "5^CPt".
_NAMED_LITERAL = rx.compile(r"(?i)\b(passwords?|passwd|pwd|pass|passphrase|token|secret)[ \t]+(\"[^\"\n]+\"|'[^'\n]+'|`[^`\n]+`)")
# Command-line flags that take a credential: --password X, --requirepass "X", redis-cli -a X,
# curl -u user:X; also as the items of a JSON command array ["--requirepass", "X"].
_FLAG = rx.compile(r"(?i)(--?[a-z0-9-]*(?:pass|password|passwd|pwd|token|secret|api-?key)[a-z0-9-]*|redis-cli\b[^\n]*?\s-a|"
                   r"\s-u|--user)(?:[ \t=]+|[\"'][ \t]*,[ \t]*)([\"']?)([^\s\"',\]]+)")
# <password>X</password> in XML configs (Maven settings.xml and alike)
_XML = rx.compile(r"(?i)<([a-z0-9_.:-]*(?:password|passwd|secret|token|apikey|api-key|api_key)[a-z0-9_.-]*)>([^<\n]{4,})</")
# Kubernetes/compose env lists: "- name: DB_PASSWORD" with "value: X" on the next line
_NAME_VALUE = rx.compile(r"(?i)name:[ \t]*[\"']?([a-z0-9_.-]*(?:password|passwd|secret|token|api_?key)[a-z0-9_.-]*)[\"']?[ \t]*\n"
                         r"[ \t]*-?[ \t]*value:[ \t]*(\"[^\"\n]*\"|'[^'\n]*'|[^\s#]+)")
# .pgpass: hostname:port:database:username:password
_PGPASS = rx.compile(r"(?m)^[A-Za-z0-9.*_-]+:(?:\d+|\*):[^\s:]+:[^\s:]+:(\S{4,})$")
# .netrc and other "keyword value" lines: a line that is just "password VALUE"
_KEYWORD_LINE = rx.compile(r"(?im)^[ \t]*(?:password|passwd)[ \t]+(\S+)[ \t]*$")
_SEGMENTS = rx.compile(r"[A-Z]+[a-z]*|[a-z]+|[0-9]+")
_PLACEHOLDER = rx.compile(r"(?i)^(?:[<{\[$@&]|%\(|%\{|%[A-Z_]+%|%s$|%d$|.*\$\{|.*\{\{|.*xxx|\*+$|\.+$|•+$|x+$|your[_-]|my[_-]|"
                          r"some[_-]?(?:pass|password|secret|token|key)\b|"
                          r"\[?redacted)")
_NOT_VALUES = frozenset("""none null nil true false undefined required optional str string bytes int bool any secretstr
    secretbytes object dict list empty same different changed stored hashed encrypted valid invalid incorrect wrong
    correct missing unset set reset needed used sent given shown ignored deprecated supported enabled disabled example
    placeholder dummy redacted hidden secret password token key value bearer basic jwt refresh access oauth oauth2
    expired revoked rotated generated pass passwd pwd changeit changeme change_me change-me changethis foo bar baz
    foobar qux spam eggs sample demo dummy fake test testing""".split())
# Glob and query syntax: "abc*", "*.log", "data?" - letters and wildcards, no digit (a password
# with a symbol at its end, "Summer2024*", has digits and stays a password).
_GLOB = rx.compile(r"^[A-Za-z._/-]*[*?][A-Za-z._/*?-]*$")
_TYPES = rx.compile(r"^(?:Optional|Annotated|Union|SecretStr|SecretBytes|Literal|List|Dict|Tuple|Sequence|Mapping)\b")
_IDENT = rx.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DOTTED = rx.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+$")
_LETTERS_ONLY = rx.compile(r"^[A-Za-z]+$")
_CONFIG_LINE = rx.compile(r"^\s*(?:[-*]\s+|export\s+|set\s+|define\(\s*)?[\"'`]?$")  # what may stand before a config key


def _segments(word: str) -> list[str]:
    """Lower-cased pieces of an identifier: DB_PASSWORD, apiKey, client-secret -> their words."""
    return [p.lower() for p in _SEGMENTS.findall(word)]


def _names_credential(key: str) -> bool:
    parts = _segments(key)
    if not parts or parts[-1] in _ABOUT:
        return False
    for i, p in enumerate(parts):
        if i > 0 and parts[i - 1] in _NOT_CRED_BEFORE:
            continue  # NextToken, page_token
        if p == "pass" and i < len(parts) - 1:
            continue  # PassThrough, pass_through, passport: "pass" names a credential only as the last word (DB_PASS)
        if p in _CRED_WORDS or (len(p) > 5 and p.endswith(_CRED_ENDINGS)):
            return True
        if p == "key" and i > 0 and parts[i - 1] in _KEY_QUALIFIERS:
            return True
    return False


def _looks_generated(value: str) -> bool:
    """Letters with digits, a capital inside, a symbol, or a passphrase of joined words."""
    letters, digits = any(c.isalpha() for c in value), any(c.isdigit() for c in value)
    inner_capital = any(a.islower() and b.isupper() for a, b in zip(value, value[1:]))
    symbol = any(c in "!#%^&*+=~?@$" for c in value)
    joined = value.replace("-", "").replace("_", "").replace(".", "")
    passphrase = len(value) >= 12 and len(value) - len(joined) >= 2 and joined.isalpha()
    return len(value) >= 6 and ((letters and digits) or inner_capital or symbol or passphrase)


_EXPRESSION = rx.compile(r"^[A-Za-z_][A-Za-z0-9_.]*[\[(]")  # an environment lookup or any call: environ["X"], get(...)
_TEMPLATE = rx.compile(r"\{[A-Za-z_][A-Za-z0-9_.]*\}|\{\{|%\([a-z_]+\)")  # "{password}", "{{ token }}", "%(pw)s"
_CODE_SHAPE = rx.compile(r"[A-Za-z0-9_]\(|[A-Za-z0-9_]\[|\{[A-Za-z_][A-Za-z0-9_.]*\}|\{\{|\)$")


def _is_code(value: str) -> bool:
    """A call, attribute, subscript, type, variable reference or template - not a literal."""
    return (_CODE_SHAPE.search(value) is not None or value.startswith(("$", "@", "&", "*", "<", "-", "/", "\\", "(", "[", "~"))
            or _DOTTED.match(value) is not None or _TYPES.match(value) is not None)


_SELF_NAMED = rx.compile(r"(?i)^[a-z_-]*(?:password|passwd|secret|token)[a-z_-]*[0-9]{0,2}$")


def _placeholder(value: str) -> bool:
    low = value.lower()
    return (len(value) < 4 or _PLACEHOLDER.match(value) is not None or low in _NOT_VALUES or _GLOB.match(value) is not None
            or ("://" in value and "@" not in value)  # a URL without credentials in it
            # "SuperSecretToken", "myregistrytoken", "X-TOKEN-SECRET": a demo value that names itself
            or _SELF_NAMED.match(value) is not None)


# Hash and signing algorithm names, as values of a password field ("password__startswith='md5$'").
_ALGORITHM = rx.compile(r"(?i)^(?:md5|sha-?(?:1|224|256|384|512)|crypt|bcrypt|scrypt|argon2(?:id|i|d)?|pbkdf2(?:_sha\d+)?|"
                        r"hmac|des|aes|rsa|plain|plaintext)\$*$")
# A segment that says the value is made up: SECRET_KEY = 'fake-key', password: 'dummy-pw' (not
# "django-insecure-...": Django generates those, and they are real keys)
_MADE_UP = frozenset("fake dummy sample example placeholder changeme".split())


def _credential_value(value: str, op: str, config_line: bool, key: str, rest_of_line: str) -> bool:
    """Whether ``value`` (after ``key`` and ``op``) is a literal credential rather than code or prose."""
    quoted = value[:1] in "\"'`" and value[-1:] == value[:1] and len(value) >= 2
    inner = value[1:-1] if quoted else value.rstrip(",)]}")
    if _placeholder(inner) or _ALGORITHM.match(inner) or "__" in key or _MADE_UP.intersection(_segments(inner)):
        return False  # a made-up value, an algorithm's name, an ORM lookup (password__startswith)
    if inner.isdigit() and _segments(key)[-1:] == ["token"]:
        return False  # creationToken = 1643842562: a counter or a timestamp
    if op.strip() == ":" and _LETTERS_ONLY.match(inner) and len(rest_of_line.split()) >= 2:
        return False  # "CERTBOT_TOKEN: Resource name part of ...": a sentence
    parts = _segments(key)  # SORT_KEY=name is not a secret; APP_KEY=9f2c... is
    bare_key = parts[-1:] == ["key"] and (len(parts) < 2 or parts[-2] not in _KEY_QUALIFIERS)
    if quoted:  # a message, a template or the key's own name is not a password
        return (len(inner.split()) < 3 and not _TEMPLATE.search(inner) and inner.lower() != key.lower()
                and (not bare_key or _looks_generated(inner)))
    prose, op = op[:1].isspace() and op.strip() != ":", op.strip()  # " is", " for the NAS was reset to": prose
    if prose or not config_line:
        # mid-sentence or mid-line: only a value that looks generated ("hunter2", "Sup3r!"), not "required"
        return not _is_code(inner) and _looks_generated(inner) and not _PATH.match(inner) and not _FILE_NAME.search(inner)
    if key.isupper() and op in ("=", ":"):
        # .env and compose files: values are literal strings, whatever characters they hold
        return (not inner.startswith(("$", "<")) and _EXPRESSION.match(inner) is None and _DOTTED.match(inner) is None
                and (not bare_key or _looks_generated(inner)))
    if _is_code(inner) or (bare_key and not _looks_generated(inner)):
        return False
    later = rest_of_line.strip()
    if op == ":" and _IDENT.match(inner) and later[:1] in ("=", "|", ","):
        return False  # a Python annotation: "password: SecretStr = ..."
    if op == ":" and _LETTERS_ONLY.match(inner) and later:
        return False  # "Password: must be at least ..." is a sentence, not a YAML value
    if op in ("=", ":=") and _IDENT.match(inner) and not any(c.isdigit() for c in inner):
        return False  # Python: password = password (a variable, not a literal)
    return True


def _span(m, group: int) -> tuple[int, int]:
    """A value's span without its quotes."""
    value = m.group(group)
    quoted = value[:1] in "\"'`" and value[-1:] == value[:1] and len(value) >= 2
    if quoted:
        return m.start(group) + 1, m.end(group) - 1
    return m.start(group), m.start(group) + len(value.rstrip(",)]}"))


def _context_values(text: str) -> list[Finding]:
    out = []
    for m in _ASSIGN.finditer(text):
        key, op, value = m.group(1), m.group(2), m.group(3)
        before = text[m.start(1) - 1:m.start(1)]
        if not _names_credential(key) or value.startswith("[REDACTED") or text[m.end(2):m.end(2) + 1] == "=" \
                or before in ("$", "%") or (op.startswith(",") and before in ("/", ".", "\\")):
            continue  # "bypass"; already redacted; "=="; $PASSWORD; readFile('/etc/passwd', 'utf8')
        if op.startswith(","):  # define('KEY', 'value'): the operator took the value's opening quote
            if text[m.end(3):m.end(3) + 1] != op[-1]:
                continue
            value = op[-1] + value + op[-1]
        line_start = text.rfind("\n", 0, m.start(1)) + 1
        line_end = text.find("\n", m.end(3))
        rest = text[m.end(3): line_end if line_end >= 0 else len(text)]
        config_line = _CONFIG_LINE.match(text[line_start:m.start(1)]) is not None
        if _credential_value(value, op, config_line, key, rest):
            start, end = (m.start(3), m.end(3)) if op.startswith(",") else _span(m, 3)
            out.append(Finding("secret_in_context", start, end))
    for m in _NAMED_LITERAL.finditer(text):
        inner = m.group(2)[1:-1]
        if len(inner.strip("\"'`")) < 4 or _MADE_UP.intersection(_segments(inner)):
            continue  # the repeated token `"is"`; password 'dummy-pw
        verb = m.group(1).lower() == "pass"  # "pass `rel_tol=0.05`": the verb, unless what follows looks generated
        if (not _placeholder(inner) and not _IDENT.match(inner) and not _is_code(inner) and " " not in inner.strip()
                and "=" not in inner.rstrip("=") and (not verb or _looks_generated(inner))):
            out.append(Finding("secret_in_context", m.start(2) + 1, m.end(2) - 1))
    for m in _FLAG.finditer(text):
        value = m.group(3)
        if m.group(1).strip().lower() in ("-u", "--user"):  # curl -u user:password (-U: proxy user)
            user, sep, secret = value.partition(":")
            if sep and secret and not _placeholder(secret) and not secret.startswith("$"):
                out.append(Finding("secret_in_context", m.start(3) + len(user) + 1, m.end(3)))
        elif (_names_credential(m.group(1).split()[-1]) or "redis-cli" in m.group(1)) and not _placeholder(value) \
                and not _is_code(value) and (m.group(2) or _looks_generated(value)):
            out.append(Finding("secret_in_context", m.start(3), m.end(3)))
    for m in _XML.finditer(text):
        if _names_credential(m.group(1)) and not _placeholder(m.group(2).strip()):
            out.append(Finding("secret_in_context", m.start(2), m.end(2)))
    for m in _NAME_VALUE.finditer(text):
        value = m.group(2)
        inner = value[1:-1] if value[:1] in "\"'" else value
        if _names_credential(m.group(1)) and not _placeholder(inner) and not inner.startswith(("$", "{")):
            out.append(Finding("secret_in_context", *_span(m, 2)))
    for m in _PASSPHRASE.finditer(text):
        words = m.group(1).split()
        if words[0].lower() not in _NOT_PASSPHRASE and not any(w.endswith((".", ",", ";", ":")) for w in words):
            out.append(Finding("secret_in_context", m.start(1), m.end(1)))  # not "is optional. Encrypted keys will be"
    for m in _MYSQL_P.finditer(text):
        if not _placeholder(m.group(1)):
            out.append(Finding("secret_in_context", m.start(1), m.end(1)))
    for pattern in (_PGPASS, _KEYWORD_LINE):
        for m in pattern.finditer(text):
            if not _placeholder(m.group(1)) and _looks_generated(m.group(1)):
                out.append(Finding("secret_in_context", m.start(1), m.end(1)))
    return out


# A quoted or backticked literal that names itself a credential: `EXAMPLE-svc-backup-pw`.
_LITERAL = rx.compile(r"`([^\s`\"']{6,80})`|\"([^\s`\"']{6,80})\"|'([^\s`\"']{6,80})'")  # the same quote on both sides
_CRED_SEGMENT = frozenset("pw pwd pass passwd password passphrase secret token key apikey cred creds credential credentials".split())


_PATH = rx.compile(r"^[A-Za-z0-9_.~-]+(?:/[A-Za-z0-9_.-]+)+/?$")  # ca/ca_key.pem, ~/.pypirc: a file, not its content
_FILE_NAME = rx.compile(r"(?i)\.(?:pem|key|crt|cer|p12|pfx|json|ya?ml|txt|env|ini|conf|cfg|toml|xml|gpg|asc|pub)$")


def _self_described(value: str) -> bool:
    parts = _segments(value)
    if not _CRED_SEGMENT.intersection(parts) or _placeholder(value):
        return False
    if _IDENT.match(value.rstrip(".")) or _is_code(value) or "/" in value or "://" in value or "=" in value.rstrip("="):
        return False  # SECRET_KEY, OAuth2PasswordRequestForm, secrets.compare_digest, paths, key=str.lower
    if "@" in value and _EXAMPLE_DOMAIN.search(value.rsplit("@", 1)[1]):
        return False  # joe:password@example.com: an example's userinfo
    if any(c in value for c in "*>:") or _FILE_NAME.search(value):
        return False  # token_*, self->key, user:pass, server-key.pem: a glob, code, a pair of names, a file
    letters = [c for c in value if c.isalpha()]
    if not any(c.isdigit() for c in value) and (all(c.islower() for c in letters) or all(c.isupper() for c in letters)):
        return False  # one case and no digits (X-TOKEN-SECRET, my_api_key): a name; generated values mix
    pieces = value.split("-")
    if all(p.islower() and p.isalpha() for p in pieces if p):
        return False  # a kebab-case name: api-key, my-secret-volume
    if all(p[:1].isupper() and (p[1:].islower() or (p.isupper() and len(p) <= 4)) for p in pieces if p):
        return False  # a header name: X-API-Key, X-Auth-Token
    return True


def _literals(text: str) -> list[Finding]:
    out = []
    for m in _LITERAL.finditer(text):
        g = next(i for i in (1, 2, 3) if m.group(i) is not None)
        if _self_described(m.group(g)):
            out.append(Finding("secret_in_context", m.start(g), m.end(g)))
    return out


_TABLE_SEP = rx.compile(r"^\s*\|?\s*:?-{3,}")


def _cells(line: str) -> list[tuple[int, str]]:
    """(offset, text) of each cell of a Markdown table row."""
    out, pos = [], 0
    parts = line.split("|")
    for i, part in enumerate(parts):
        if not (i == 0 and not part.strip()) and not (i == len(parts) - 1 and not part.strip()):
            out.append((pos, part))
        pos += len(part) + 1
    return out


def _table_columns(text: str) -> list[Finding]:
    """Cells under a column headed by a credential word ("| Account | Password |"), and numbers
    under one headed by an id's name ("| Employee | National ID |") that validate as one."""
    out: list[Finding] = []
    lines = _lines(text)
    for i, (_, line) in enumerate(lines[:-1]):
        if "|" not in line:
            continue
        header = _cells(line)
        # a Markdown table has a separator row; office tables and exports come as "a | b | c" rows
        separated = _TABLE_SEP.match(lines[i + 1][1]) is not None
        if not separated and (len(header) < 2 or len(_cells(lines[i + 1][1])) != len(header)
                              or (i > 0 and "|" in lines[i - 1][1])):
            continue  # without a separator row, only the first row of a block can be its header
        secrets = {j for j, (_, h) in enumerate(header) if _names_credential(h) and len(h.strip()) <= 32}  # a label
        ids = {j for j, (_, h) in enumerate(header) if _ID_WORDS.search(h)}
        for start, row in lines[i + (2 if separated else 1):] if secrets or ids else []:
            if "|" not in row or _TABLE_SEP.match(row) or (not separated and len(_cells(row)) != len(header)):
                break  # the table ended, or another began (so each row is read under one header: linear)
            for j, (at, cell) in enumerate(_cells(row)):
                value = cell.strip().strip("`\"'")
                if not value:
                    continue
                begin = start + at + cell.index(value)
                if j in secrets and " " not in value and not _placeholder(value) and not _is_code(value):
                    out.append(Finding("secret_in_context", begin, begin + len(value)))
                elif j in ids and sum(c.isdigit() for c in value) >= 6:
                    kind = next((k for k, check in _KEYED_IDS if check(value)), None)
                    if kind:
                        out.append(Finding(kind, begin, begin + len(value)))
    return out


# ---------------------------------------------------------------- random-looking tokens

_TOKEN = rx.compile(r"[A-Za-z0-9+/_.-]{20,}={0,2}")
_PUBLIC_KEY = rx.compile(r"(?:ssh-(?:rsa|ed25519|dss)|ecdsa-sha2-nistp\d+|sk-ssh-ed25519@openssh\.com)[ \t]+$")
_WORDISH = rx.compile(r"[A-Z]?[a-z]{2,}|[A-Z]{2,}")


def entropy(s: str) -> float:
    """Shannon entropy in bits per character."""
    n = len(s)
    return -sum(c / n * math.log2(c / n) for c in Counter(s).values()) if n else 0.0


_HEX_OR_WORD = rx.compile(r"^(?:[0-9a-f]+|[0-9A-F]+|[A-Z]+|[a-z]+|[A-Z][a-z]+)$")


def _credential_token(value: str) -> bool:
    """After "Bearer"/"Basic": base64 or a generated token, not a word ("basic authentication",
    "Basic RetryHandler")."""
    if "/" in value and all(p.isalpha() and p.islower() for p in value.split("/")):
        return False  # "basic request/response": words
    if any(c.isdigit() or c in "+/=" for c in value):
        return True
    return _looks_generated(value) and not _wordy(value)


def _wordy(value: str) -> bool:
    """Most letters in word-shaped runs (RetryHandler, OAuth2PasswordRequestForm): a name, not random."""
    letters = sum(c.isalpha() for c in value)
    return letters > 0 and sum(len(w) for w in _WORDISH.findall(value) if len(w) >= 3) / letters >= 0.6


def _random_token(tok: str) -> bool:
    """Mixed classes, high entropy, and letters that do not form words.

    Identifiers, module paths and URL paths split into words (``OAuth2PasswordRequestForm``
    -> Auth, Password, Request, Form); a generated credential splits into fragments.
    """
    classes = any(c.islower() for c in tok) + any(c.isupper() for c in tok) + any(c.isdigit() for c in tok)
    if classes < 3 or entropy(tok) < 4.0:
        return False
    parts = [p for p in rx.compile(r"[_.\-/]").split(tok) if p]
    if len(parts) > 1 and all(_HEX_OR_WORD.match(p) for p in parts):
        return False  # NODE_SEA_FUSE_fce680ab...: a name and a hash, each one case
    letters = sum(c.isalpha() for c in tok)
    in_words = sum(len(w) for w in _WORDISH.findall(tok) if len(w) >= 3)
    return (letters == 0 or in_words / letters < 0.6) and not _encoded_prose(tok)


def _encoded_prose(tok: str) -> bool:
    """Base64 of words ("Martin v. Löwis" in a MIME header): encoded text, not a key. A secret
    inside it is still found by the decoded view (guard.decoded_views)."""
    import base64
    import binascii

    try:
        raw = base64.b64decode(tok + "=" * (-len(tok) % 4), validate=True)
        text = raw.decode("utf-8")
    except (binascii.Error, ValueError):
        return False
    return " " in text and all(c.isprintable() or c.isspace() for c in text)


def _public_pem(token: str) -> bool:
    """A base64 blob that decodes to a certificate or public key (kubeconfig's certificate-authority-data)."""
    if not token.startswith("LS0tLS1CRUdJTi"):  # "-----BEGIN" in base64
        return False
    import base64
    import binascii

    try:
        head = base64.b64decode(token[:64] + "=" * (-len(token[:64]) % 4))[:40]
    except (binascii.Error, ValueError):
        return False
    return b"CERTIFICATE" in head or b"PUBLIC KEY" in head


_HASH_BEFORE = rx.compile(r"(?i)(?:sha-?(?:1|224|256|384|512)|md5|blake2[bs]?|digest|checksum|hash|fingerprint|thumbprint|"
                          r"integrity)[^\n]{0,12}$")
_KEY_BEFORE = rx.compile(r"([A-Za-z_][A-Za-z0-9_]*)[\"']?[ \t]*[:=][ \t]*[\"']?$")
_PUBLIC_PEM = rx.compile(r"-----BEGIN (?:CERTIFICATE|[A-Z ]*PUBLIC KEY|X509 CRL|CERTIFICATE REQUEST|PGP SIGNATURE|PGP SIGNED MESSAGE|"
                         r"PGP PUBLIC KEY BLOCK|SSH SIGNATURE|DH PARAMETERS|EC PARAMETERS)-----[\s\S]*?-----END [A-Z0-9 ]+-----")


def _tokens(text: str) -> list[Finding]:
    out = []
    public = [(m.start(), m.end()) for m in _PUBLIC_PEM.finditer(text)] if "-----BEGIN" in text else []
    for m in _TOKEN.finditer(text):
        if not _random_token(m.group(0)) or any(a <= m.start() < b for a, b in public):
            continue
        word_start = max(text.rfind(c, max(0, m.start() - 2048), m.start()) for c in " \t\n\"'`(<[") + 1
        url = text[word_start:m.start() + 2]
        if "://" in url and not (text[m.start() - 1] == "=" and any(c in url for c in "?&;")):
            continue  # a URL's path or fragment; a value in its query ("?sig=...") still counts
        if text[word_start:m.start()].startswith("data:") and ";base64," in text[word_start:m.start()]:
            continue  # a data: URL's content (an inline image)
        if _PUBLIC_KEY.search(text[max(0, m.start() - 40):m.start()]) or _public_pem(m.group(0)):
            continue  # an SSH public key or a base64 certificate: published on purpose
        if _HASH_BEFORE.search(text[max(0, m.start() - 24):m.start()]):
            continue  # a digest ("sha256 value: bYkw5o..."), published to check a download
        key = _KEY_BEFORE.search(text[max(0, m.start() - 60):m.start()])
        if key and (_segments(key.group(1))[-1:] in (["cursor"], ["marker"]) or
                    any(a in _NOT_CRED_BEFORE and b == "token" for a, b in zip(_segments(key.group(1)), _segments(key.group(1))[1:]))):
            continue  # "NextToken": "...": a page cursor, not a credential
        out.append(Finding("high_entropy_token", m.start(), m.end()))
    return out


# ---------------------------------------------------------------- all together


def shapes_in(text: str) -> list[Shape]:
    """The SHAPES that may match ``text``: those with a needle in it."""
    folded = text.casefold()  # RE2's (?i) matches "ſ" for "s" and the Kelvin sign for "k": so does casefold
    return [s for s in SHAPES if any(n in (folded if s.folded else text) for n in s.needles)]


def find_secrets(text: str, view: str = "plain") -> list[Finding]:
    """Every finding in ``text``, overlapping ones merged."""
    out = [Finding(kind, m.start(g), m.end(g)) for kind, pattern, g, *_ in shapes_in(text) for m in pattern.finditer(text)
           if g == 0 or m.end(g) == len(text) or not _is_word(text[m.end(g)]) or kind in ("url_credentials",)]
    out = [f for f in out if f.kind != "email" or _is_address(text, f)]
    out = [f for f in out if f.kind != "url_credentials" or not (_placeholder(text[f.start:f.end])
                                                                  or _reserved_host(text, f.end + 1))]
    out = [f for f in out if f.kind not in ("bearer_token", "basic_auth") or _credential_token(text[f.start:f.end])]
    out = [f for f in out if f.kind != "private_key" or _KEY_BODY.search(text[f.start:f.end])]
    out += _phones(text) + _numbers(text) + _context_values(text) + _literals(text) + _table_columns(text) + _tokens(text)
    return merge([Finding(f.kind, f.start, f.end, view) for f in out])


def merge(found: list[Finding]) -> list[Finding]:
    """Overlapping findings as one span (the first kind), sorted."""
    found = sorted(found, key=lambda f: (f.start, -f.end))
    out: list[Finding] = []
    for f in found:
        if out and f.start < out[-1].end:
            if f.end > out[-1].end:
                out[-1] = Finding(out[-1].kind, out[-1].start, f.end, out[-1].view)
            continue
        out.append(f)
    return out
