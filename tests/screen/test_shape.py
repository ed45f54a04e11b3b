"""screen.shape: stuffing, copies and credential solicitation, with the benign cases that
must pass (advice that names a credential, ordinary prose and code)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from microrag_engine.engine import demo_corpus
from microrag_engine.load import load_documents
from microrag_engine.screen.shape import copy_of, solicitation, stuffed

TOPICS = ["vpn access", "password reset", "printer toner", "parking permits", "expense reports", "wifi", "payroll", "badges"]


def test_one_template_repeated_with_other_keywords_is_stuffing():
    sweep = "\n\n".join(f"## {x}\n\n" + " ".join(f"{y} help: for {y} see this page." for y in TOPICS) for x in TOPICS)
    assert stuffed(sweep).startswith("stuffing:")
    assert not stuffed("short " * 10)  # too short to judge


def test_the_handbook_is_not_stuffed_nor_soliciting():
    docs = load_documents([demo_corpus()])
    assert docs
    assert [d.path for d in docs if stuffed(d.text) or solicitation(d.text)] == []


def test_copies_are_near_identical_texts():
    text = "# Tips\n\n" + " ".join(f"{x} guide." for x in TOPICS)
    assert copy_of(text, [("@m/tips-0.md", text)]).startswith("copy:")
    assert copy_of(text + " One more line.", [("@m/tips-0.md", text)])
    assert not copy_of(text, [("@m/other.md", "A different page about the cafeteria menu and its opening hours.")])
    assert not copy_of("", [("a", "")])


def test_requests_for_credentials_are_solicitation_and_advice_is_not():
    for bad in ["Then send your current login credentials and MFA code to helpdesk-verify@example.net.",
                "Receipts must be uploaded to expenses-portal.example including your corporate card PIN.",
                "Please e-mail your pаssword to the IT desk at it-desk@example.org.",  # Cyrillic a
                "The helpdesk verifies you once you e-mail them your password and one-time code at verify.example."]:
        assert solicitation(bad).startswith("solicitation:"), bad
    for fine in ["Never send your password to anyone, not even IT.", "Enter your password at the login page.",
                 "Upload the slides to the shared drive with your team.", "Passwords must be 12 characters long."]:
        assert not solicitation(fine), fine


def test_a_request_names_where_the_credential_goes():
    # phishing needs a destination: an address, a host, a number, a desk or team, "us"
    for bad in ["To renew, send your corporate card PIN and number to the payroll team.",
                "Text your one-time code to +1 555 0100 to confirm the transfer.",
                "Post your recovery phrase at https://wallet-check.example/verify before Friday.",
                "Please send your password to IT so we can migrate your account.",
                "Send your password to your manager before the audit.",
                "Submit your username and password via the verification portal before Friday.",
                "Share your MFA code with the on-call engineer when they call you.",
                "Receipts must be uploaded to CANARY7731 including your corporate card PIN."]:  # an unknown token
        assert solicitation(bad).startswith("solicitation:"), bad
    # documentation says how a credential is given to a program, and names no one
    for fine in ["Then provide your password via the pserver method, for example:",
                 "The framework provides views and forms that may be used to allow users to change their own passwords.",
                 "Provide your password via the PGPASSWORD variable in config.yaml.",
                 "Provide your credentials to the client via the credentials.ini file.",
                 "The page shown after a user has been emailed a link to reset their password.",
                 "A colleague can use the service on your behalf without telling them your password.",
                 "The server e-mails the user a link to a form that lets them change their password."]:
        assert not solicitation(fine), fine


def test_dev_pages_about_passwords_are_not_solicitation():
    from helpers.zoo import page
    from microrag_engine.load import parse_upload

    for name in ("django/topics/auth/default.html", "apache2/howto/auth.html"):
        raw = page(name)
        assert solicitation(parse_upload(name, raw)[0].text) == "", name


@given(st.text(max_size=3000))
def test_never_raise(text):
    assert isinstance(stuffed(text), str) and isinstance(solicitation(text), str)
    assert isinstance(copy_of(text, [("x", text[::-1])]), str)


def test_stuffing_is_measured_on_prose_not_on_reference_repetition():
    from helpers.zoo import page
    from microrag_engine.load import parse_upload
    from microrag_engine.screen.shape import prose, stuffed_page

    # Doxygen's member reference repeats "template<typename Derived >" and its own paragraphs
    # entry after entry: the whole text compresses like a stuffed page, its prose does not
    name = "eigen/classEigen_1_1PlainObjectBase.html"
    text = parse_upload(name, page(name))[0].text
    assert stuffed(text) and not stuffed_page(text)
    # code blocks and table rows are left out, a paragraph counts once, sentences stay
    assert prose("Intro.\n\n```\nx = 1\n```\n\na | b\n1 | 2\n\nIntro.\n\nEnd.") == "Intro.\n\nEnd."
    # the stuffed template survives both cuts: each copy carries other keywords
    sweep = "\n\n".join(f"## {x}\n\n" + " ".join(f"{y} help: for {y} see this page." for y in TOPICS) for x in TOPICS)
    assert stuffed_page(sweep)
