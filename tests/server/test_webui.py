"""The web UI end to end in headless Chromium (Debian's, driven by Playwright).

Screenshots go to a temporary folder, or to $MICRORAG_SCREENSHOTS (the ones in
docs/ were made with MICRORAG_SCREENSHOTS=docs).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="server extra not installed")
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright not installed (dev extra)")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed "
                                "(make test installs it: scripts/install-chromium.sh)")

from conftest import needs_models  # noqa: E402
from helpers.server import Running  # noqa: E402

ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def ui(tmp_path_factory):
    srv = Running(tmp_path_factory.mktemp("ui"), rate_per_minute=100_000)  # shared by the module: no order-dependent 429s
    shots = Path(os.environ.get("MICRORAG_SCREENSHOTS") or tmp_path_factory.mktemp("shots"))
    shots.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        # Playwright's wait_for_function evaluates strings, which the page's own CSP forbids
        # (as it should); the CSP itself is checked in test_page_is_served_with_a_strict_csp.
        page = browser.new_context(viewport={"width": 1280, "height": 900}, bypass_csp=True).new_page()
        yield srv, page, shots
        browser.close()
    srv.stop()


def use_key(page, key: str, ready: str | None = None) -> None:
    """Enter ``key`` in the header form; wait for ``ready`` (a selector) when given."""
    page.fill("#apikey", key)
    page.press("#apikey", "Enter")
    if ready:
        page.wait_for_selector(ready)


def ask(page, question: str) -> None:
    page.fill("#question", question)
    page.press("#question", "Enter")  # keyboard only
    page.wait_for_function("document.querySelector('#askbtn').disabled === false && "
                           "document.querySelector('#status').textContent !== 'Retrieving...'")


@needs_models
def test_ask_shows_cited_answer_and_score_bars(ui):
    srv, page, shots = ui
    page.goto(srv.url + "/")
    assert page.get_by_label("Question").is_visible()
    ask(page, "How many vacation days do employees get?")
    cite = page.locator("#answer a.cite").first
    assert "leave.md" in cite.inner_text()
    assert page.locator("#sources li").count() >= 1
    first = page.locator("#sources li").first
    assert "leave.md" in first.inner_text()
    for kind in ("kw", "em", "hy"):
        assert first.locator(f".bar.{kind}").count() == 1
    assert float(first.locator(".bar.hy").get_attribute("aria-valuenow")) > 0
    assert "Grounding gate passed" in page.inner_text("#status") and "null" not in page.inner_text("#status")
    # every answer sentence carries its NLI verdict, linked to the chunk that decided it
    verdicts = page.locator("#verify li.verdict")
    assert verdicts.count() >= 1 and "✓ supported" in verdicts.first.inner_text()
    assert "sentences supported" in page.inner_text("#verify")
    cite.click()
    assert "highlight" in (first.get_attribute("class") or "")
    page.screenshot(path=str(shots / "ask.png"), full_page=True)


@needs_models
def test_reader_never_sees_restricted_chunks(ui):
    srv, page, _ = ui
    page.goto(srv.url + "/")
    use_key(page, srv.key["reader"])
    page.wait_for_function("document.querySelector('#whoami').textContent.includes('reader')")
    ask(page, "What does the L5 salary band pay?")
    assert "salaries.md" not in page.inner_text("#sources")
    assert "180000" not in page.inner_text("#answer")
    assert page.locator("#contribute").is_hidden() and page.locator("#admin").is_hidden()


@needs_models
def test_upload_review_and_retrieve(ui):
    srv, page, shots = ui
    page.goto(srv.url + "/")
    use_key(page, srv.key["contrib"], ready="#contribute:not([hidden])")
    page.fill("#upsource", "facilities/capybara.md")
    page.fill("#upbody", "# Capybara lounge\n\nThe capybara lounge is on floor 7, next to the library.")
    page.click("#uploadform button[type=submit]")
    page.wait_for_function("document.querySelector('#upstatus').textContent.includes('quarantined')")
    page.screenshot(path=str(shots / "upload.png"), full_page=True)
    doc = page.inner_text("#upstatus").split(":")[0]

    use_key(page, srv.key["admin"], ready="#admin:not([hidden])")
    page.wait_for_selector(f"#queue button[aria-label='Approve {doc}']")
    page.screenshot(path=str(shots / "admin.png"), full_page=True)
    page.click(f"#queue button[aria-label='Approve {doc}']")
    page.wait_for_function("document.querySelector('#queue').textContent.includes('Nothing waiting')")
    assert page.locator("#audit tbody tr").count() > 0

    use_key(page, "")
    ask(page, "Where is the capybara lounge?")
    assert doc in page.inner_text("#sources")


@needs_models
def test_phone_layout_has_no_horizontal_scroll(ui):
    srv, page, shots = ui
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(srv.url + "/")
    ask(page, "Who approves production deploys?")
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
    page.screenshot(path=str(shots / "phone.png"), full_page=True)
    page.set_viewport_size({"width": 1280, "height": 900})


def test_page_is_served_with_a_strict_csp(ui):
    import httpx

    srv, _, _ = ui
    r = httpx.get(srv.url + "/")
    assert r.status_code == 200 and "<form id=\"askform\">" in r.text
    assert "script-src 'self'" in r.headers["content-security-policy"]
    assert httpx.get(srv.url + "/ui/app.js").status_code == 200
