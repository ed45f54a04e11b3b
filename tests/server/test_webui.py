"""The web UI end to end in headless Chromium (Debian's, driven by Playwright).

Two real servers on loopback: one answering extractively (the default, no model), one
whose answers come from a scripted OpenAI-compatible model, so that an answer can carry
any Markdown or hostile markup a model might write. Both index a hostile document next
to the handbook. The page is checked at 360, 390, 768 and 1440 px, audited by axe-core
(from web/node_modules, installed from the npm registry by scripts/vendor-web.sh), and
driven by keyboard only.

Screenshots are written to docs/ (shown in docs/asking/web-ui.md), or to $MICRORAG_SCREENSHOTS.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="server extra not installed")
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright not installed (dev extra)")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed "
                                "(make test installs it: scripts/install-chromium.sh)")

from conftest import needs_models  # noqa: E402
from helpers.llm import ScriptedServer, delta, sse, start, stream_chat  # noqa: E402
from helpers.server import Running  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
AXE = ROOT / "web" / "node_modules" / "axe-core" / "axe.min.js"
VENDOR = ROOT / "src" / "microrag_engine" / "server" / "static" / "vendor"
WIDTHS = (360, 390, 768, 1440)
ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]

# Planted in the index (operator-ingested, as a hostile file would be) and written by the
# scripted model: every way markup could run script, load something remote or forge a link.
HOSTILE = ("Lunch menu for the cafeteria.\n\n<script>window.__pwned = 'script'</script>\n"
           "<img src=x onerror=\"window.__pwned = 'img'\"> <iframe src=\"javascript:window.__pwned='iframe'\"></iframe>\n"
           "[click for the menu](javascript:window.__pwned='link') and ![pixel](https://evil.example/p.png)\n"
           "<a href=\"data:text/html,<script>parent.__pwned=1</script>\">data link</a> <style>body{display:none}</style>\n")
LONG = "{* ../../docs_src/security/tutorial_oauth2_scopes_and_long_names_everywhere_py310.py hl[1, 8:9, 12:15] *}"
MARKDOWN_ANSWER = [
    "## Carry-over\n\nEmployees get **20 vacation days** a year [source: leave.md · chunk 0].\n\n",
    "- Up to `5` unused days carry over\n- They expire on *March 31*\n\n",
    "```python\ndays = carry_over(unused, limit=5)  # " + "x" * 160 + "\n```\n\n",
    f"See the [leave policy](https://intranet.example/leave) and {LONG}.\n\n",
    "Sign in at [wiki.corp.example.com](https://corp.example.co/login).\n\n",  # a link whose text names another host
    "| kind | days |\n|---|---:|\n| vacation | 20 |\n\n",
    "The rules are written down [source: handbooks/engineering/really_long_document_name_about_vacation_carry_over_"
    "rules_for_everyone.md · chunk 0].\n\n",
    # forged citations: wrapped in a link of the model's own, dressed up as one, or of a chunk never retrieved
    "Official: [[source: leave.md · chunk 0]](https://evil.example/phish) and [[leave.md · chunk 0]](https://evil.example/x).\n\n",
    "The CEO's salary is public [source: salaries.md · chunk 0].\n\n",
    HOSTILE,
]


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield chromium
        chromium.close()


def new_page(browser, width: int = 1280):
    # Playwright's wait_for_function evaluates strings, which the page's own CSP forbids (as it
    # should); the CSP itself is checked against the headers in test_page_is_served_with_a_strict_csp.
    return browser.new_context(viewport={"width": width, "height": 900}, bypass_csp=True).new_page()


class Watched:
    """A page with everything that would betray a hostile payload recorded: dialogs, requests
    that leave loopback, responses of 400 or more, console errors."""

    def __init__(self, page) -> None:
        self.page, self.dialogs, self.remote, self.failed, self.errors = page, [], [], [], []
        page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        page.on("request", lambda r: None if r.url.startswith(("http://127.0.0.1", "data:", "blob:"))
                else self.remote.append(r.url))
        page.on("response", lambda r: self.failed.append(f"{r.status} {r.url}") if r.status >= 400 else None)
        page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)

    def clean(self) -> None:
        assert self.page.evaluate("window.__pwned === undefined")
        assert not self.dialogs and not self.remote, (self.dialogs, self.remote)


@pytest.fixture(scope="module")
def shots():
    out = Path(os.environ.get("MICRORAG_SCREENSHOTS") or ROOT / "docs")
    out.mkdir(parents=True, exist_ok=True)
    return out


LONG_NAME = "handbooks/engineering/really_long_document_name_about_vacation_carry_over_rules_for_everyone.md"


def _hostile_corpus(tmp: Path) -> Path:
    (tmp / "corpus" / Path(LONG_NAME).parent).mkdir(parents=True)
    (tmp / "corpus" / "cafeteria.txt").write_text(HOSTILE)
    (tmp / "corpus" / LONG_NAME).write_text("# Carry-over rules\n\nUnused vacation days carry over until March 31.")
    return tmp


@pytest.fixture(scope="module")
def ui_server(tmp_path_factory):
    """The default server (extractive answers); nothing is uploaded to it."""
    srv = Running(_hostile_corpus(tmp_path_factory.mktemp("ui")), rate_per_minute=100_000)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def upload_server(tmp_path_factory):
    """A server for the upload tests, whose uploads would change what the others see."""
    srv = Running(tmp_path_factory.mktemp("uploads"), rate_per_minute=100_000)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def model_server(tmp_path_factory):
    """A server whose scripted model writes what each test scripts (MARKDOWN_ANSWER mostly)."""
    model = ScriptedServer(url="")
    httpd, _ = start(model)
    srv = Running(_hostile_corpus(tmp_path_factory.mktemp("llm-ui")), rate_per_minute=100_000, llm=model.cfg())
    yield srv, model
    srv.stop()
    httpd.shutdown()


@pytest.fixture
def page(browser):
    """A fresh browser context per test: no key, conversation or focus left by another test."""
    page = new_page(browser)
    yield page
    page.context.close()


@pytest.fixture
def ui(ui_server, page):
    return ui_server, Watched(page)


@pytest.fixture
def llm_ui(model_server, page):
    srv, model = model_server
    return srv, Watched(page), model


@pytest.fixture
def upload_ui(upload_server, page):
    return upload_server, Watched(page)


def opened(fixture) -> tuple[Running, Watched, object]:
    """(server, watched page, page) of a ``ui``-style fixture, the page at the server's "/"."""
    srv, w = fixture
    w.page.goto(srv.url + "/")
    return srv, w, w.page


def markdown_reply():
    return sse(*(delta(content=piece) for piece in MARKDOWN_ANSWER))


def slow_reply(responder_gap_s: float = 0.4, pieces: int = 40):
    """A model that takes its time: 40 pieces, 0.4 s apart."""
    return lambda h: stream_chat(h, [f"Piece {i} of a slow answer about vacation days. " for i in range(pieces)], responder_gap_s)


def use_key(page, key: str, ready: str | None = None) -> None:
    """Enter ``key`` in the header form; wait for ``ready`` (a selector) when given."""
    page.fill("#apikey", key)
    page.press("#apikey", "Enter")
    if ready:
        page.wait_for_selector(ready)


def ask(page, question: str) -> None:
    """Type ``question`` and press Enter (keyboard only); wait until the answer is complete."""
    turns = page.locator("#conversation > li").count()
    page.fill("#question", question)
    page.press("#question", "Enter")
    page.wait_for_function(f"document.querySelectorAll('#conversation > li').length === {turns + 1} && "
                           "!document.querySelector('#askbtn').disabled")


def last_turn(page):
    return page.locator("#conversation > li").last


def no_horizontal_overflow(page) -> None:
    width = page.evaluate("window.innerWidth")
    sizes = page.evaluate("[document.documentElement.scrollWidth, document.body.scrollWidth]")
    # and no element sticks out past the right edge (a clipped box would not widen the page)
    wide = page.evaluate("""w => [...document.querySelectorAll('body *')].filter(e => {
        const r = e.getBoundingClientRect(); if (!r.width || getComputedStyle(e).visibility === 'hidden') return false;
        let p = e.parentElement;  // inside a box that scrolls on its own, it may be as wide as it likes
        while (p && p !== document.body) { const o = getComputedStyle(p).overflowX; if (o === 'auto' || o === 'scroll') return false;
                                           p = p.parentElement; }
        return r.right > w + 1; }).map(e => e.tagName + '#' + e.id + '.' + e.className).slice(0, 5)""", width)
    assert max(sizes) <= width and not wide, (width, sizes, wide)


def axe_findings(page) -> list[str]:
    """Serious or critical axe-core findings on the page as it stands: violations, and the
    checks axe could not decide ("incomplete": a person would have to), except a contrast
    axe cannot measure because the text sits in a box that scrolls under another (its
    colours are the same as those of the measured text around it)."""
    if page.evaluate("typeof window.axe") == "undefined":
        page.add_script_tag(path=str(AXE))
    return page.evaluate("""() => axe.run(document, {resultTypes: ['violations', 'incomplete']}).then(r =>
        [...r.violations, ...r.incomplete.filter(v => v.id !== 'color-contrast')]
        .filter(v => v.impact === 'serious' || v.impact === 'critical')
        .map(v => v.id + ' (' + v.impact + '): ' + v.nodes.slice(0, 3)
        .map(n => n.target.join(' ') + ' ' + n.failureSummary).join(', ')))""")


def external_hrefs(page, where: str = "#conversation") -> list[str]:
    return page.eval_on_selector_all(f"{where} a:not(.cite):not(.jump)", "as => as.map(a => a.getAttribute('href'))")


# ---------------------------------------------------------------- asking


@needs_models
def test_ask_shows_cited_answer_and_score_bars(ui):
    srv, w, page = opened(ui)
    assert page.get_by_label("Question").is_visible()
    ask(page, "How many vacation days do employees get?")
    turn = last_turn(page)
    cite = turn.locator(".answer a.cite").first
    assert cite.inner_text() == "[1]" and cite.get_attribute("aria-label") == "Source 1: leave.md · chunk 0"
    # Under the answer, the sources it cites by number and by their documents' own titles.
    assert turn.locator(".cited li").all_inner_texts() == ["Leave — leave.md · chunk 0"]
    first = page.locator("#sources li").first
    assert first.locator("strong").inner_text() == "[1] Leave" and "leave.md · chunk 0" in first.inner_text()
    assert first.locator(".chunktext h3").inner_text() == "Leave"  # the chunk's "# Leave", rendered, not raw Markdown
    # Scores, the gate and verification wait behind one disclosure: the answer comes first.
    why = turn.locator("details.why")
    assert not why.get_attribute("open") and not turn.locator(".bars").first.is_visible()
    why.locator("summary").click()
    scored = turn.locator(".why .scored").first
    for kind in ("kw", "em", "hy"):
        assert scored.locator(f".bar.{kind}").count() == 1
    assert float(scored.locator(".bar.hy").get_attribute("aria-valuenow")) > 0
    assert "Grounding gate passed" in why.inner_text() and "null" not in why.inner_text()
    assert page.inner_text("#status") == "Answer complete."  # announced: #status is a live region
    # every answer sentence carries its NLI verdict, linked to the chunk that decided it
    verdicts = turn.locator(".verify li.verdict")
    assert verdicts.count() >= 1 and "✓ supported" in verdicts.first.inner_text()
    assert "sentences supported" in turn.locator(".verify").inner_text()
    verdicts.first.locator("a.cite").last.click()
    assert page.locator("#sources li.highlight").count() == 1
    cite.click()
    assert "highlight" in (first.get_attribute("class") or "")
    page.keyboard.press("Escape")  # from the chunk back to the citation that led there
    assert page.evaluate("document.activeElement.classList.contains('cite')")
    w.clean()


@needs_models
def test_reader_never_sees_restricted_chunks_or_titles(ui):
    srv, w, page = opened(ui)
    use_key(page, srv.key["reader"])
    page.wait_for_function("document.querySelector('#whoami').textContent.includes('reader')")
    page.wait_for_selector("#samples li button")
    assert "Salary" not in page.inner_text("#samples")  # suggestions come from what the caller may read
    ask(page, "What does the L5 salary band pay?")
    assert "salaries.md" not in page.inner_text("#sources")
    assert "180000" not in page.inner_text("#conversation")
    assert page.locator("#contribute").is_hidden() and page.locator("#admin").is_hidden()


@needs_models
def test_another_key_starts_another_conversation(ui):
    srv, w, page = opened(ui)
    sent: list[dict] = []
    page.on("request", lambda r: sent.append(json.loads(r.post_data)) if r.url.endswith("/query") else None)
    use_key(page, srv.key["admin"], ready="#admin:not([hidden])")
    ask(page, "What does the L5 salary band pay?")
    assert "salaries.md" in page.inner_text("#sources")
    use_key(page, srv.key["reader"])
    page.wait_for_function("document.querySelector('#whoami').textContent.includes('reader')")
    # what the admin asked and read is gone from the screen, and never sent as the reader's history
    assert page.locator("#conversation > li").count() == 0 and page.inner_text("#sources") == ""
    ask(page, "and what about L6?")
    assert sent[-1]["history"] == []
    assert "180000" not in page.inner_text("body")


@needs_models
def test_sample_questions_come_from_the_index_and_ask(ui):
    srv, w, page = opened(ui)
    page.wait_for_selector("#samples li button")
    offered = page.locator("#samples li button").all_inner_texts()
    titles = {"VPN", "Leave", "Deploys", "cafeteria", "Carry-over rules"}  # the public titles; never "Salary bands"
    assert offered and all(any(t in q for t in titles) for q in offered), offered
    assert page.get_attribute("#question", "placeholder").startswith("e.g. ")
    page.locator("#samples li button").first.focus()
    page.keyboard.press("Enter")  # a suggestion is asked at once
    page.wait_for_function("document.querySelectorAll('#conversation > li').length === 1 && "
                           "!document.querySelector('#askbtn').disabled")
    assert last_turn(page).locator(".q").inner_text() == offered[0]
    assert page.locator("#samples").is_hidden()  # the conversation has started
    assert page.evaluate("document.activeElement.id") == "question"  # the focus did not fall to the page


# ---------------------------------------------------------------- conversations


@needs_models
def test_follow_up_uses_the_conversation_and_new_conversation_forgets_it(ui):
    srv, w, page = opened(ui)
    sent: list[dict] = []
    page.on("request", lambda r: sent.append(json.loads(r.post_data)) if r.url.endswith("/query") else None)
    ask(page, "How many vacation days do employees get?")
    ask(page, "And how many of them carry over?")
    assert page.locator("#conversation > li").count() == 2
    assert sent[0]["history"] == []
    first_answer = page.locator("#conversation > li").first.locator(".answer").inner_text()
    assert [t["role"] for t in sent[1]["history"]] == ["user", "assistant"]
    assert sent[1]["history"][0]["content"] == "How many vacation days do employees get?"
    assert sent[1]["history"][1]["content"].split()[:3] == first_answer.split()[:3]
    # the follow-up was searched for with what it refers to, and the page says so in words
    flags = last_turn(page).locator(".flags").text_content()  # behind "Why these sources?", closed
    assert "searched for (with the conversation): How many vacation days" in flags and "hmac" not in flags
    assert "leave.md" in page.inner_text("#sources")
    # a citation in the older turn brings its own sources back
    page.locator("#conversation > li").first.locator(".answer a.cite").first.click()
    assert page.locator("#sources li.highlight").count() == 1
    page.click("#newconv")
    assert page.locator("#conversation > li").count() == 0
    assert page.evaluate("document.activeElement.id") == "question"
    ask(page, "Who approves production deploys?")
    assert sent[-1]["history"] == []


@needs_models
def test_new_conversation_or_stop_during_a_slow_answer_leaves_nothing_behind(llm_ui):
    srv, w, model = llm_ui
    page = w.page
    page.goto(srv.url + "/")
    sent: list[dict] = []
    page.on("request", lambda r: sent.append(json.loads(r.post_data)) if r.url.endswith("/query") else None)
    model.script(slow_reply(), slow_reply())
    page.fill("#question", "How many vacation days do employees get?")
    page.press("#question", "Enter")
    # (the server sends an answer only once the whole of it has passed the output guard, so
    # the wait is between the sources and the first words)
    page.locator("#sources li").first.wait_for()
    page.click("#stopbtn")
    page.wait_for_function("!document.querySelector('#askbtn').disabled")
    assert "stopped" in last_turn(page).inner_text().lower() and page.locator("#stopbtn").is_hidden()
    # a second slow answer, abandoned for a new conversation halfway
    page.fill("#question", "And how many carry over?")
    page.press("#question", "Enter")
    page.wait_for_function("document.querySelectorAll('#conversation > li').length === 2 && "
                           "document.querySelector('#sources li') !== null")
    page.click("#newconv")
    assert page.locator("#conversation > li").count() == 0
    # An answer stopped before the server called the model leaves its slow reply unused: the
    # next reply is scripted now, whichever of them the model was asked for.
    model.script(markdown_reply())
    ask(page, "How many vacation days carry over?")
    assert sent[-1]["history"] == []  # neither the stopped nor the abandoned answer is history
    assert page.locator("#conversation > li").count() == 1 and "Piece" not in page.inner_text("#conversation")


# ---------------------------------------------------------------- Markdown and hostile content


@needs_models
def test_answer_markdown_renders_sanitised_with_citations(llm_ui):
    srv, w, model = llm_ui
    page = w.page
    model.script(markdown_reply())
    page.goto(srv.url + "/")
    ask(page, "How many vacation days carry over?")
    answer = last_turn(page).locator(".answer")
    assert answer.locator("strong", has_text="20 vacation days").count() == 1
    assert answer.locator("ul > li").count() == 2 and answer.locator("li code", has_text="5").count() == 1
    assert answer.locator("pre code").count() == 1 and "carry_over" in answer.locator("pre code").inner_text()
    assert answer.locator("h4", has_text="Carry-over").count() == 1  # "##" sits below the page's own headings
    assert answer.locator(".tablewrap table td", has_text="vacation").count() == 1
    link = answer.locator("a", has_text="leave policy")
    assert link.get_attribute("href") == "https://intranet.example/leave"
    assert "noopener" in link.get_attribute("rel") and link.get_attribute("target") == "_blank"
    assert "leave policy (intranet.example)" in answer.inner_text()  # where a link goes is shown
    assert "wiki.corp.example.com (corp.example.co)" in answer.inner_text()  # even when its text names a host
    cite = answer.locator("a.cite[aria-label*='leave.md']")
    assert cite.count() >= 1
    cite.first.click()
    assert page.locator("#sources li.highlight").count() == 1
    # every citation link is to a chunk this answer retrieved; a forged one is shown as such
    sources = set(page.eval_on_selector_all("#sources li", "ls => ls.map(l => l.id)"))
    cited = page.eval_on_selector_all("#conversation a.cite", "as => as.map(a => a.getAttribute('href').slice(1))")
    assert cited and set(cited) <= sources, (cited, sources)
    assert "[salaries.md · chunk 0] (not among this answer's sources)" in answer.inner_text()
    # the model's own link cannot wrap a citation or dress up as one, and is the only one leaving
    assert page.locator("#conversation a a").count() == 0
    links = ["https://intranet.example/leave", "https://corp.example.co/login"]
    assert external_hrefs(page, "#conversation .answer") == links
    assert set(external_hrefs(page)) == set(links)  # the verification rows too
    # the hostile part of the answer is inert text: nothing ran, nothing loaded, no live link
    for tag in ("script", "img", "iframe", "style"):
        assert page.locator(f"#conversation {tag}, #sources {tag}").count() == 0, tag
    assert "window.__pwned" in answer.inner_text()  # shown as text, so a reader sees what the model wrote
    assert "[image: pixel]" in answer.inner_text()  # an image is its description, never a request
    # verification rows are the verifier's sentences, markup rendered, none of them markup alone
    turn = last_turn(page)
    turn.locator("details.why > summary").click()  # verification is behind the disclosure
    said = turn.locator(".verify li.verdict > .said, .verify li.verdict > details").all_inner_texts()
    assert said and not [s for s in said if not any(ch.isalnum() for ch in s)], said
    assert turn.locator(".verify details pre code").count() == 1  # the code block is one row, folded
    assert any("kind: vacation; days: 20" in s for s in said)  # a table row, read with its header
    # a heading is checked too: this one is a source's own heading ("# Carry-over rules"), so supported
    heading = turn.locator(".verify li.verdict", has=page.locator(".said", has_text="Carry-over")).first
    assert "ok" in heading.get_attribute("class").split()
    w.clean()


@needs_models
def test_a_citation_with_a_page_links_to_its_chunk(llm_ui):
    """A paged source's tag ends " · p. N" (PDF, office files): still a numbered link, not raw text."""
    srv, w, model = llm_ui
    page = w.page
    model.script(sse(delta(content="Employees get 20 days a year [source: leave.md · chunk 0 · p. 2].")))
    page.goto(srv.url + "/")
    ask(page, "How many vacation days do employees get?")
    answer = last_turn(page).locator(".answer")
    assert answer.locator("a.cite").all_inner_texts() == ["[1]"]
    assert "[source:" not in answer.inner_text() and "p. 2" not in answer.inner_text()
    w.clean()


@needs_models
def test_hostile_document_stays_text_in_answer_and_sources(ui):
    srv, w, page = opened(ui)
    ask(page, "What is on the cafeteria lunch menu?")
    assert "cafeteria.txt" in page.inner_text("#sources")
    assert "onerror" in page.inner_text("#sources")  # the chunk, shown as the text it is
    for tag in ("script", "img", "iframe", "style"):
        assert page.locator(f"#conversation {tag}, #sources {tag}").count() == 0, tag
    assert external_hrefs(page, "#conversation") == [] and external_hrefs(page, "#sources") == []
    w.clean()


# ---------------------------------------------------------------- every width


@needs_models
@pytest.mark.parametrize("width", WIDTHS)
def test_no_horizontal_scroll_at_any_width(llm_ui, shots, width):
    srv, w, model = llm_ui
    page = w.page
    page.set_viewport_size({"width": width, "height": 900})
    model.script(markdown_reply())
    page.goto(srv.url + "/")
    no_horizontal_overflow(page)
    ask(page, "How many vacation days carry over?")
    page.locator("#sources li").first.wait_for()
    assert LONG_NAME in page.inner_text("#conversation")  # a long cited name, which must wrap
    no_horizontal_overflow(page)
    box = page.locator("#askbtn").bounding_box()
    assert box["x"] + box["width"] <= width  # the Ask button is on screen, not pushed off it
    page.screenshot(path=str(shots / f"ui-{width}.png"), full_page=True)
    # the contributor's and the admin's sections too, with a long-named upload in them
    use_key(page, srv.key["admin"], ready="#admin:not([hidden])")
    drop_files(page, {f"{'quarterly-planning-notes-' * 4}{width}.md": TEXT_DROP})
    page.wait_for_function("document.querySelector('#uploads li .state:not(.sending)') !== null")
    page.wait_for_selector("#audit tbody tr")
    no_horizontal_overflow(page)
    w.clean()


@needs_models
def test_sources_stay_in_view_beside_a_long_conversation(llm_ui):
    srv, w, model = llm_ui
    page = w.page
    page.set_viewport_size({"width": 1024, "height": 700})
    model.script(*[markdown_reply() for _ in range(3)])
    page.goto(srv.url + "/")
    for _ in range(3):
        ask(page, "How many vacation days carry over?")
    page.locator("#question").scroll_into_view_if_needed()  # where one reads after three long answers
    assert page.evaluate("window.scrollY") > 700
    box = page.locator("#sourcespanel").bounding_box()  # (the viewport's coordinates)
    assert box["y"] < 700 and box["y"] + box["height"] > 0, box
    page.locator("#conversation > li").last.locator(".answer a.cite").first.click()
    top = page.locator("#sources li.highlight").bounding_box()["y"]
    assert 0 <= top < 700  # the cited chunk is on screen, not at the top of a long page


# ---------------------------------------------------------------- contributing


TEXT_DROP = "# Capybara lounge\n\nThe capybara lounge is on floor 7, next to the library."


def drop_files(page, files: dict[str, str]) -> None:
    """Drop ``files`` (name -> text) on the drop zone, as a file manager would."""
    handle = page.evaluate_handle("""files => { const dt = new DataTransfer();
        for (const [name, text] of Object.entries(files)) dt.items.add(new File([text], name));
        return dt; }""", files)
    page.dispatch_event("#dropzone", "dragover", {"dataTransfer": handle})
    assert "over" in page.get_attribute("#dropzone", "class")
    page.dispatch_event("#dropzone", "drop", {"dataTransfer": handle})


@needs_models
def test_drag_and_drop_upload_shows_quarantine_then_review(upload_ui, shots):
    srv, w, page = opened(upload_ui)
    use_key(page, srv.key["contrib"], ready="#contribute:not([hidden])")
    # only the labels this key may publish are offered
    assert page.eval_on_selector_all("#droplabel option", "os => os.map(o => o.value)") == ["public", "internal"]
    drop_files(page, {"capybara.md": TEXT_DROP, "scan.pdf": "%PDF-1.7 binary", "huge.md": "x" * 1_200_000})
    page.wait_for_function("document.querySelectorAll('#uploads li .state:not(.sending)').length === 3")
    rows = page.locator("#uploads li").all_inner_texts()
    assert any(r.startswith("quarantined") and "capybara.md: waiting for an admin's review" in r for r in rows), rows
    assert any("not sent" in r and "scan.pdf" in r and "microrag ingest" in r for r in rows), rows
    assert any("not sent" in r and "huge.md" in r and "upload limit" in r for r in rows), rows  # refused before sending
    page.wait_for_function("document.querySelector('#mine').textContent.includes('capybara.md')")
    assert "quarantined" in page.inner_text("#mine")
    page.screenshot(path=str(shots / "upload.png"), full_page=True)
    doc = next(r for r in rows if "capybara.md" in r).split(": ")[0].split()[-1]

    admin = page.context.new_page()  # an admin, in another tab, approves it
    admin.goto(srv.url + "/")
    use_key(admin, srv.key["admin"], ready="#admin:not([hidden])")
    admin.wait_for_selector(f"#queue button[aria-label='Approve {doc}']")
    admin.screenshot(path=str(shots / "admin.png"), full_page=True)
    admin.focus(f"#queue button[aria-label='Approve {doc}']")
    admin.keyboard.press("Enter")
    admin.wait_for_function("document.querySelector('#queue').textContent.includes('Nothing waiting')")
    assert "Approved" in admin.inner_text("#adminstatus")
    admin.wait_for_function("document.activeElement.id === 'adm-h'")  # the focus stays in the queue, not on the page
    assert admin.locator("#audit tbody tr").count() > 0

    # the contributor's page sees it go live without a reload (it looks again, every 20 s, while
    # something waits and the page is in front)
    page.bring_to_front()
    page.wait_for_function("[...document.querySelectorAll('#uploads li')].some(li => li.textContent.includes('capybara.md') "
                           "&& li.querySelector('.state').textContent === 'live')", timeout=45_000)
    assert "live" in page.inner_text("#mine")
    use_key(page, "")
    ask(page, "Where is the capybara lounge?")
    assert doc in page.inner_text("#sources")


@needs_models
def test_pasted_upload_still_works(upload_ui):
    srv, w, page = opened(upload_ui)
    use_key(page, srv.key["contrib"], ready="#contribute:not([hidden])")
    page.click("#contribute summary")
    page.fill("#upsource", "facilities/otters.md")
    page.fill("#upbody", "# Otter pond\n\nThe otter pond is behind building C.")
    page.click("#uploadform button[type=submit]")
    page.wait_for_function("document.querySelector('#upstatus').textContent.includes('quarantined')")


# ---------------------------------------------------------------- accessibility


@needs_models
@pytest.mark.skipif(not AXE.exists(), reason="axe-core not installed (make test runs scripts/vendor-web.sh: npm ci in web/)")
@pytest.mark.parametrize("width", WIDTHS)
def test_axe_finds_no_serious_issue_on_any_screen(llm_ui, width):
    srv, w, model = llm_ui
    page = w.page
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(srv.url + "/")
    page.wait_for_selector("#samples li button")
    assert axe_findings(page) == []
    model.script(markdown_reply())
    ask(page, "How many vacation days carry over?")
    page.locator("#conversation a.cite").first.click()
    page.locator("#conversation details summary").first.click()  # a folded code row, open
    assert axe_findings(page) == []
    use_key(page, srv.key["admin"], ready="#admin:not([hidden])")  # the contributor's and the admin's sections
    drop_files(page, {f"axe-{width}.md": TEXT_DROP, "scan.pdf": "%PDF"})
    page.wait_for_function("document.querySelectorAll('#uploads li .state:not(.sending)').length === 2")
    page.wait_for_selector("#queue li button")
    page.click("#contribute summary")
    assert axe_findings(page) == []


@needs_models
def test_keyboard_alone_reaches_every_control_with_visible_focus(ui):
    srv, w = ui
    page = w.page
    # (listening from the start: Playwright turns on file-chooser interception when the first
    # listener arrives, and a chooser opened before that is never reported)
    choosers: list = []
    page.on("filechooser", lambda chooser: choosers.append(chooser))
    page.goto(srv.url + "/")
    use_key(page, srv.key["admin"], ready="#admin:not([hidden])")
    page.wait_for_selector("#samples li button")
    ask(page, "How many vacation days do employees get?")
    page.focus(".skip")  # the first stop; every other one follows by Tab alone
    reached, unfocused = [], []
    for _ in range(150):
        page.keyboard.press("Tab")
        info = page.evaluate("""() => { const e = document.activeElement; const s = getComputedStyle(e);
            return {tag: e.tagName, id: e.id, cls: e.className, text: (e.textContent || '').trim().slice(0, 40),
                    outline: s.outlineStyle !== 'none' && parseFloat(s.outlineWidth) >= 2}; }""")
        if info["tag"] == "BODY":
            break
        reached.append(info)
        if not info["outline"]:
            unfocused.append(info)
    ids = {r["id"] for r in reached}
    for control in ("apikey", "question", "askbtn", "newconv", "choosefiles", "droplabel", "refreshaudit"):
        assert control in ids, (control, ids)
    assert any(r["cls"] == "cite" for r in reached)  # citation links
    assert any(r["tag"] == "SUMMARY" for r in reached)  # "Or paste text"
    assert not unfocused, unfocused  # every stop shows where the focus is
    # Enter on a citation brings its chunk; Enter on "Choose files" opens the file chooser
    page.focus("#conversation .answer a.cite")
    page.keyboard.press("Enter")
    assert page.locator("#sources li.highlight").count() == 1
    page.focus("#choosefiles")
    page.keyboard.press("Enter")
    for _ in range(50):
        if choosers:
            break
        page.wait_for_timeout(100)
    assert choosers and choosers[0].is_multiple()
    # on a fresh page the skip link is the first stop, and it lands on the question
    use_key(page, "")
    page.goto(srv.url + "/")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.className") == "skip"
    page.keyboard.press("Enter")
    page.keyboard.type("Who approves production deploys?")
    assert page.input_value("#question") == "Who approves production deploys?"


@needs_models
def test_every_form_control_has_a_label(ui):
    srv, w, page = opened(ui)
    use_key(page, srv.key["admin"], ready="#admin:not([hidden])")
    unlabelled = page.evaluate("""() => [...document.querySelectorAll('input, select, textarea, button')]
        .filter(e => !e.hidden && e.type !== 'hidden' && !(e.labels && e.labels.length) && !e.getAttribute('aria-label')
                     && !(e.tagName === 'BUTTON' && e.textContent.trim())).map(e => e.id || e.outerHTML)""")
    assert unlabelled == []


# ---------------------------------------------------------------- what is served


def test_page_is_served_with_a_strict_csp(ui_server):
    import httpx

    srv = ui_server
    r = httpx.get(srv.url + "/")
    assert r.status_code == 200 and "<form id=\"askform\">" in r.text
    csp = r.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "style-src 'self'" in csp and "'unsafe-inline'" not in csp
    body = r.text.split("<body>")[1]
    assert "<script>" not in body and "style=" not in body and not re.search(r"\son[a-z]+=", body)  # nothing inline
    for asset in ("/ui/app.js", "/ui/vendor/markdown-it.min.js", "/ui/vendor/purify.min.js", "/ui/favicon.svg"):
        got = httpx.get(srv.url + asset)
        assert got.status_code == 200 and got.headers["content-security-policy"] == csp, asset
    for address in ("/ui/", "/ui"):  # what a person types: the page, not a 404
        page = httpx.get(srv.url + address, follow_redirects=True)
        assert page.status_code == 200 and page.text == r.text and page.headers["content-security-policy"] == csp, address
    icon = httpx.get(srv.url + "/favicon.ico")
    assert icon.status_code == 200 and icon.headers["content-type"] == "image/x-icon" and icon.content[:4] == b"\0\0\1\0"


@needs_models
def test_page_loads_with_no_failed_request_or_console_error(ui):
    srv, w = ui
    w.page.goto(srv.url + "/")
    w.page.wait_for_selector("#samples li button")
    w.page.goto(srv.url + "/favicon.ico")
    assert not w.failed and not w.errors, (w.failed, w.errors)


@needs_models
def test_a_whole_session_under_the_real_csp_breaks_no_rule(model_server, browser):
    """The other tests bypass the CSP (Playwright's waits evaluate strings); here it is
    enforced, and asking, rendering a Markdown answer with a table and its verification,
    and following a citation break none of its rules (a violation is a console error)."""
    srv, model = model_server
    model.script(markdown_reply())
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    w = Watched(page)
    page.goto(srv.url + "/")
    page.locator("#samples li button").first.wait_for()
    page.fill("#question", "How many vacation days carry over?")
    page.press("#question", "Enter")
    page.locator("#conversation .verify li.verdict").first.wait_for(state="attached", timeout=60_000)
    page.locator("#conversation .answer a.cite").first.click()
    page.locator("#sources li.highlight").wait_for()
    assert page.locator("#conversation .answer table").count() == 1  # the part whose alignment is a style attribute
    page.context.close()
    assert not w.errors and not w.failed, (w.errors, w.failed)


@pytest.mark.skipif(not (ROOT / "web" / "node_modules").exists(), reason="web/node_modules not installed "
                    "(scripts/vendor-web.sh runs npm ci from web/package-lock.json)")
def test_vendored_libraries_are_the_locked_npm_packages():
    """The page's copies of markdown-it and DOMPurify are byte for byte the packages
    web/package-lock.json pins (and npm checked against their integrity hashes)."""
    modules = ROOT / "web" / "node_modules"
    pairs = {"markdown-it.min.js": modules / "markdown-it" / "dist" / "browser" / "markdown-it.umd.min.js",
             "purify.min.js": modules / "dompurify" / "dist" / "purify.min.js"}
    for name, locked in pairs.items():
        assert (VENDOR / name).read_bytes() == locked.read_bytes(), f"{name}: run scripts/vendor-web.sh --copy"
    lock = json.loads((ROOT / "web" / "package-lock.json").read_text())["packages"]
    for pkg in ("markdown-it", "dompurify"):
        assert json.loads((modules / pkg / "package.json").read_text())["version"] == lock[f"node_modules/{pkg}"]["version"]
