"""DLP detectors: values in credential contexts are found; code, names and placeholders are not.

The benchmark (benchmarks/dlp_report.py) measures recall and false findings on corpora;
these are the cases each rule exists for, so a regression names the rule it broke.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from microrag_engine import dlp
from microrag_engine.guard import redact

# Technical documentation (issue #16's list, and what the negatives benchmark turned up):
# each names or shows a credential's *kind*, never a value.
TECH_DOCS = [
    "Use `secrets.compare_digest()` to compare tokens in constant time.",
    "form_data: OAuth2PasswordRequestForm = Depends()",
    'oauth2_scheme = OAuth2PasswordBearer(tokenUrl="token")',
    "raise HTTPException(status_code=status.HTTP_403_FORBIDDEN)",
    "See https://github.com/OAI/OpenAPI-Specification/blob/main/versions/3.1.0.md#responses-object",
    "GET /api/v1/users/me returns the current user.",
    "password: str",
    "    password: Annotated[str, Form()]",
    "hashed_password = get_password_hash(password)",
    "The password is required and is never stored in clear text.",
    "login(user, password=password)",
    'return {"access_token": create_token(user, settings.SECRET_KEY), "token_type": "bearer"}',
    '"token_uri": "https://oauth2.googleapis.com/token"',
    "withCredentials([string(credentialsId: 'nexus-token', variable: 'NEXUS_TOKEN')])",
    "DB_PASSWORD=${DB_PASSWORD}",
    'API_KEY = os.environ["API_KEY"]',
    "Set `X-API-Key` in the header; the `api-key` field is deprecated.",
    "commit 3f786850e387550fdab836ed7e6dc881de23001b",
    "BUILD_SHA=207fc93ee641fa3c2b097f12f7dbd2b272989c6e",
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE41tGfdZz67A8hwH7YhP0eecq5FRmZ3NR0KR46ZHinu ops@host",
    "Look at os.path.join for details; see also the token module.",
    "uuid 123e4567-e89b-12d3-a456-426614174000 and timestamp 1700000000",
    "Password for the Synology NAS was reset by the helpdesk.",
    "ISBN 978-3-16-148410-0, order 4111 1111 1111 1112 (not a card: the check digit is wrong).",
    # from an outside review on Debian, npm and AWS CLI docs
    "git clone git@gitlab.com:procps-ng/procps.git",
    '"repository": "git+ssh://git@github.com:npm/cli.git#v1.0.27"',
    "00000020 00 01 02 03 04 05 09 0a 3e 30 3d",
    "credential_source=Ec2InstanceMetadata",
    "--global-endpoint-token-version v2Token",
    '"NextToken": "EXAMPLErZXIiOiBudWxsLCAiYm90b190cnVuY2F0ZV9hbW91bnQiOiAxfQ=="',
    "--context-entries \"ContextKeyName='aws:CurrentTime',ContextKeyValues='2019-04-25T11:00:00Z'\"",
    "If you proxy requires basic authentication, send it in the header.",
    "`object.passphrase` is optional. Encrypted keys will be decrypted with it",
    "Use `server-key.pem`, the `X-TOKEN-SECRET` header and `token_*` names; see <20030112190404.GE29873@epoch.metaslash.com>",
    "-----BEGIN CERTIFICATE-----\nMIIDdzCCAl+gAwIBAgIEAgAAuTANBgkqhkiG9w0BAQUFADBaMQswCQYDVQQGEwJJRTES\n-----END CERTIFICATE-----",
]


@pytest.mark.parametrize("text", TECH_DOCS)
def test_code_names_and_placeholders_are_not_secrets(text):
    redacted, found = redact(text)
    assert found == [] and redacted == text, [(f.kind, text[f.start:f.end]) for f in found]


# (text, the value that must go, the kind that finds it)
VALUES = [
    ('SECRET_KEY = "09d25e094faa6ca2556c818166b7a9563b93f7099f6f0f4caa6cf63b88e8d3e7"', "09d25e094faa", "secret_in_context"),
    ("the wifi password is Tr0ub4dor&3 (guest network separate)", "Tr0ub4dor&3", "secret_in_context"),
    ("The password for the QA user was reset to KJd9-Jx_@-yW by the helpdesk.", "KJd9-Jx_@-yW", "secret_in_context"),
    ("pwd for the old Nagios box is lantern-copper-violet-falls", "lantern-copper-violet-falls", "secret_in_context"),
    ("user `admin`, pass `C0b@lt!77`.", "C0b@lt!77", "secret_in_context"),
    ("DJANGO_SECRET_KEY=django-insecure-7f(k2!x@0s^u)p", "django-insecure-7f(k2!x@0s^u)p", "secret_in_context"),
    ("DB_PASSWORD=hunterhunter", "hunterhunter", "secret_in_context"),
    ("define( 'DB_PASSWORD', 'C0ffee-Break' );", "C0ffee-Break", "secret_in_context"),
    ("Server=db;User ID=app;Password=%i01bQx9!;Encrypt=True;", "%i01bQx9!", "secret_in_context"),
    ("redis-cli -h redis.lan -p 6379 -a 'sGR#t0pS3cret' FLUSHDB", "sGR#t0pS3cret", "secret_in_context"),
    ('command: ["redis-server", "--requirepass", "PrY1xQ8zLm"]', "PrY1xQ8zLm", "secret_in_context"),
    ("curl -u deployer:F@lc0n99 --upload-file x.jar", "F@lc0n99", "secret_in_context"),
    ("<password>Footb4ll!</password>", "Footb4ll!", "secret_in_context"),
    ("- name: ADMIN_PASSWORD\n  value: \"granite-Peak-2291\"", "granite-Peak-2291", "secret_in_context"),
    ("db.internal:5432:billing:reporting:goRhom8Qv!", "goRhom8Qv!", "secret_in_context"),
    ("machine ci.example\n  login ci-bot\n  password Summer2023!\n", "Summer2023!", "secret_in_context"),
    ("| Account | Password |\n|---|---|\n| svc_backup | Zebra-Kite-42 |", "Zebra-Kite-42", "secret_in_context"),
    ("postgres://app:S3cr3t!@db.internal:5432/app", "S3cr3t!", "url_credentials"),
    ("key AKIAIOSFODNN7EXAMPLE in the config", "AKIAIOSFODNN7EXAMPLE", "aws_access_key"),
    ("Card on file 6250 9460 0000 0016 for travel.", "6250 9460 0000 0016", "credit_card"),
    ("IBAN DE89 3704 0044 0532 0130 00 BIC COBADEFFXXX", "DE89 3704 0044 0532 0130 00", "iban"),
    # a Dutch BSN (11-test) that is also a well-formed US SSN: either name will do
    ("| Employee | National ID |\n|---|---|\n| Ana | 111222333 |", "111222333", "national_id|us_ssn"),
    ("Call me on 020 7946 0958 or 06 12 34 56 78.", "020 7946 0958", "phone"),
    # from an outside review: glued names, "pw", qualified keys, mysql -p, passphrases, odd first characters
    ("PGPASSWORD=Sup3rS3cret psql -h db", "Sup3rS3cret", "secret_in_context"),
    ("The root pw is 'Spring2024!' for now.", "Spring2024!", "secret_in_context"),
    ("The VPN pre-shared key is 7fQ!x2Lp9#Rw", "7fQ!x2Lp9#Rw", "secret_in_context"),
    ("mysql -u root -pS3cretPass db", "S3cretPass", "secret_in_context"),
    ("passphrase: correct horse battery staple", "correct horse battery staple", "secret_in_context"),
    ('"NewPassword": "]35d/{pB9Fo9wJ"', "]35d/{pB9Fo9wJ", "secret_in_context"),
    ("The new password for the kiosk: ]35d/{pB9Fo9wJ", "]35d/{pB9Fo9wJ", "secret_in_context"),
    ("service | username | password\ngrafana | admin | Gr@fana-2024-x", "Gr@fana-2024-x", "secret_in_context"),
    ("postgresql://admin:Sup3rS3cret@db.internal:5432/prod", "Sup3rS3cret", "url_credentials"),
]


@pytest.mark.parametrize("text, value, kind", VALUES)
def test_credential_values_are_found_in_their_context(text, value, kind):
    redacted, found = redact(text)
    assert value not in redacted and set(kind.split("|")) & {f.kind for f in found}, redacted


def test_reports_carry_kinds_and_spans_never_values():
    text = "password: Zq8!vN2kLm4R"
    found = dlp.find_secrets(text)
    assert [(f.kind, text[f.start:f.end]) for f in found] == [("secret_in_context", "Zq8!vN2kLm4R")]
    assert all("Zq8" not in repr(f) for f in found)


def test_example_domains_are_nobodys_address():
    assert redact("write to ann@example.com or bob@brightwave.co")[0] == "write to ann@example.com or [REDACTED:email]"


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=st.sampled_from("pasword:=|-\n `'\"0123456789AKIZabc@./_ "), max_size=400))
def test_spans_lie_inside_the_text_and_do_not_overlap(text):
    found = dlp.find_secrets(text)
    assert all(0 <= f.start < f.end <= len(text) for f in found)
    assert all(a.end <= b.start for a, b in zip(found, found[1:]))


# ---------------------------------------------------------------- documentation's made-up values (#31)


@pytest.mark.parametrize("text", [
    "INSERT INTO phones VALUES('704-555-1212'); -- or (202) 555-0143, +1 415 555 0100",  # 555: fiction's exchange
    "postgresql://scott:tiger@db.example.com/test and mysql://app:s3cretPW@192.0.2.4/shop",  # RFC 2606, RFC 5737
    "redis://:Pa55w0rd@[2001:db8::7]:6379 or amqp://celery:Pa55w0rd@mq.test/",  # RFC 3849, RFC 6761
    "password = \"changeme\" and SECRET_KEY = 'fake-key' and token: 'dummy-token'",  # placeholders
    "SELECT * FROM ft WHERE ft MATCH 'abc*'; the token \"abc*\" matches every word starting abc",  # query syntax
    "User.objects.filter(password__startswith='md5$') and digest(password, 'sha1')",  # lookups, algorithm names
    "# Authors: Christian Lorentzen <lorentzen.ch@gmail.com>\n#          Roman Yurchak <rth.yurchak@gmail.com>",
    "Signed-off-by: Ann Author <ann@kernel.org>; report it to security@djangoproject.com or git@vger.kernel.org",
])
def test_made_up_and_published_values_are_not_findings(text):
    assert dlp.find_secrets(text) == [], [(f.kind, text[f.start:f.end]) for f in dlp.find_secrets(text)]


@pytest.mark.parametrize("text, value", [
    ("call 415-867-5309 after six", "415-867-5309"),
    ("mysql://root:Kx9!vQ2mZ@mysql-primary.nwa.internal:3306/shop", "Kx9!vQ2mZ"),
    ("DB_PASSWORD=Summer2024*", "Summer2024*"),  # a symbol at the end is not a glob
    ("reach Jane at jane.doe.hr@kestrel-logistics.io", "jane.doe.hr@kestrel-logistics.io"),
])
def test_real_looking_values_next_to_them_are_still_found(text, value):
    assert value not in redact(text)[0]


def test_real_documentation_pages_keep_their_examples():
    from helpers.zoo import page
    from microrag_engine.load import parse_upload

    for name, kept in (("django/topics/testing/advanced.html", "fake-key"), ("django/releases/1.10.html", "md5$"),
                       ("sklearn/auto_examples/linear_model/plot_poisson_regression_non_normal_loss.html",
                        "lorentzen.ch@gmail.com")):
        text = parse_upload(name, page(name))[0].text
        assert kept in text and kept in redact(text)[0], name


# One value of every shape; a test text is one of them with letters re-cased or swapped for the
# characters RE2's (?i) folds to ASCII ("ſ" for s, the Kelvin sign for k), between other pieces.
_SHAPE_VALUES = ["AKIAABCDEFGHIJKLMNOP", "ghp_" + "a1" * 18, "github_pat_" + "b2" * 22, "glpat-" + "c3" * 11,
                 "xoxb-1234567890ab", "https://hooks.slack.com/services/T000/B000/XXXXXXXXXXXXXXXXXXXX",
                 "sk_live_" + "d4" * 9, "whsec_" + "e5" * 9, "sk-proj-" + "f6" * 11, "AIza" + "g7" * 18, "hf_" + "h8" * 16,
                 "npm_" + "i9" * 18, "pypi-" + "j0" * 26, "SG." + "k1" * 9 + "." + "l2" * 9, "SK" + "0a" * 16,
                 "eyJ" + "m3" * 5 + ".eyJ" + "n4" * 5 + "." + "o5" * 5, "-----BEGIN RSA PRIVATE KEY-----\nMIIE",
                 "AccountKey=" + "p6" * 11, "SharedAccessKey=" + "q7" * 11, "?sig=" + "r8" * 11,
                 "postgres://u:pw1@db.internal", "Bearer " + "s9" * 9, "token " + "t0" * 9, "Basic " + "u1" * 7,
                 "x.y@example.org"]


def _recased(value: str, flips: list[int]) -> str:
    out = list(value)
    for i, how in zip(range(len(out)), flips):
        c = out[i]
        out[i] = {1: c.swapcase(), 2: "\u017f" if c in "sS" else c, 3: "\u212a" if c in "kK" else c}.get(how, c)
    return "".join(out)


_shape_texts = st.builds(lambda before, value, flips, after: before + _recased(value, flips) + after,
                         st.text(max_size=8), st.sampled_from(_SHAPE_VALUES), st.lists(st.integers(0, 4), max_size=40),
                         st.text(max_size=8))


@settings(max_examples=400, deadline=None)
@given(_shape_texts)
def test_a_shape_never_matches_a_text_without_one_of_its_needles(text):
    # find_secrets runs a pattern only where a needle is: a match without one would be a secret missed.
    may = {shape.kind for shape in dlp.shapes_in(text)}
    for kind, pattern, *_ in dlp.SHAPES:
        assert pattern.search(text) is None or kind in may, (kind, text)


@settings(max_examples=200, deadline=None)
@given(st.lists(_shape_texts, min_size=1, max_size=3).map(" ".join))
def test_the_needle_check_changes_no_finding(text):
    every = dlp.find_secrets(text)
    saved = dlp.shapes_in
    try:
        dlp.shapes_in = lambda _: list(dlp.SHAPES)  # every pattern runs on every text, as before the check
        assert dlp.find_secrets(text) == every, text
    finally:
        dlp.shapes_in = saved
