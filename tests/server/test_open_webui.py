"""The exact requests Open WebUI 0.12.4 sent to /v1 (recorded by scripts/try-open-webui.sh,
tests/fixtures/open_webui/), replayed over a real socket against the same index: the
contract an Open WebUI user relies on - models listed, answers cited as a chat UI renders
them, refusals in plain words, titles that are titles, the reader's clearance - is kept."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="server extra not installed")

from conftest import needs_models  # noqa: E402
from helpers.server import Running  # noqa: E402
from microrag_engine.config import preset  # noqa: E402
from microrag_engine.engine import demo_corpus  # noqa: E402
from microrag_engine.ingest import ingest_paths  # noqa: E402
from microrag_engine.store import open_store  # noqa: E402
from microrag_engine.types import NOT_IN_DOCUMENTS  # noqa: E402

pytestmark = needs_models

FIXTURES = Path(__file__).parents[1] / "fixtures" / "open_webui"
RECORDED = sorted(FIXTURES.glob("*/*.json"))
RESTRICTED_DOC = "engineering/on-call-runbook.md"  # labelled restricted, as the script does
RESTRICTED_FACT = "USD 400"


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("owui")
    corpus = tmp / "demo-corpus"
    shutil.copytree(demo_corpus(), corpus)
    runbook = corpus / RESTRICTED_DOC
    runbook.write_text("---\nlabel: restricted\n---\n" + runbook.read_text())
    ingest_paths(open_store(tmp / "ix"), [corpus], preset("default"))
    s = Running(tmp, location=str(tmp / "ix"), rate_per_minute=100_000)
    yield s
    s.stop()


def _replayed(srv, recorded: dict) -> tuple[int, dict, str]:
    """Send what Open WebUI sent, with the reader's key; the reply, and its text (streamed or not)."""
    r = srv.call(recorded["method"], recorded["path"], "reader", json=recorded["body"] or None)
    if not (recorded["body"] or {}).get("stream"):
        body = r.json()
        text = body["choices"][0]["message"]["content"] if "choices" in body else ""
        return r.status_code, body, text
    events = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")]
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e.get("choices"))
    return r.status_code, events[-1], text


def test_the_fixtures_are_there():
    assert len(RECORDED) >= 10, "run scripts/try-open-webui.sh to record what Open WebUI sends"


@pytest.mark.parametrize("path", RECORDED, ids=[f"{p.parent.name}/{p.stem}" for p in RECORDED])
def test_what_open_webui_sent_is_answered_as_it_expects(srv, path):
    recorded = json.loads(path.read_text())
    status, body, text = _replayed(srv, recorded)
    assert status == 200, body
    step, kind = recorded["step"], recorded["kind"]
    if kind == "models":
        assert "microrag" in [m["id"] for m in body["data"]]
        return
    if kind.startswith("task-"):  # its own housekeeping: the JSON it parses, never a refusal
        key = kind.removeprefix("task-")
        parsed = json.loads(text)
        assert set(parsed) == {key} and NOT_IN_DOCUMENTS not in text
        if key == "title":
            assert 0 < len(parsed["title"]) <= 80
        return
    assert kind == "chat" and body["choices"][0]["finish_reason"] == "stop"
    ext = body["microrag"]
    if step == "refusal":
        assert text == NOT_IN_DOCUMENTS and ext["refused"] and ext["reason"]  # plain words; the why apart
    elif step == "restricted":
        assert RESTRICTED_FACT not in text and all(RESTRICTED_DOC not in s["doc"] for s in ext["sources"])
    else:  # answer, follow-up: cited [n], the list renders as Markdown (blank line before it)
        assert "[1]" in text and "\n\nSources:\n\n1. " in text and "[source:" not in text
        assert ("20 paid vacation days" if step == "answer" else "carry over up to 5") in text
