"""Mine question/answer pairs from the public-docs zoo's *dev* corpora, for the answer head.

    .venv/bin/python training/mine_qa.py            # ~1.5 min on 2 cores; writes build/qa-mined.jsonl

Two shapes of page carry a question and the passage that answers it, written by the
documentation's own authors:

* a heading that is a question ("Does Django scale?", "How do I ...") and the paragraph
  under it (FAQ pages, how-to guides);
* a definition list's term and its description (glossaries, man-page option lists, API
  reference entries), asked as "What is X?" / "What does X do?".

Each item's candidates are its own answer (the positive) and the answers of other
questions or terms of the same page (hard negatives: same page, same register). A
candidate is shown as the answerer embeds a passage - ``<page title>: <text>`` - but
without the heading or term it hangs under: the head must learn which text answers, not
that the question's words are in the heading.

Only the dev corpora whose licence lets us ship weights trained on them (see LICENCES);
never the test or outside ones, never the QA benchmark sets.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

from bs4 import BeautifulSoup

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from zoo.corpora import CORPORA, fetch  # noqa: E402

# The dev corpora and their documentation licences (Debian's copyright files). git (GPL-2)
# and octave (GPL-3) are dev corpora too but are left out: weights derived from them
# could not ship under Apache-2.0 without doubt.
LICENCES = {"django": "BSD-3-Clause", "sklearn": "BSD-3-Clause", "apache2": "Apache-2.0", "eigen": "MPL-2.0",
            "cryptography": "Apache-2.0 OR BSD-3-Clause", "certbot": "Apache-2.0", "typer": "MIT"}
OUT = ROOT / "build" / "qa-mined.jsonl"
MAX_CHARS = 700  # the answerer's PIECE_CHARS
MAX_NEG = 7
PER_PAGE = 8  # items a page gives at most (API pages list dozens of parameters)
PER_CORPUS = 1500  # so that no one corpus's register dominates
_QUESTION = re.compile(r"^(?:how|what|why|when|where|which|who|can|could|should|is|are|do|does|will|may)\b", re.I)
_HOW_TO = re.compile(r"^how (?:to|do)\b", re.I)  # "How to deploy": a question without its mark
_PERMALINK = re.compile(r"[¶#]\s*$")
_SPACE = re.compile(r"\s+")


def _text(tag) -> str:
    return _SPACE.sub(" ", _PERMALINK.sub("", tag.get_text(" ", strip=True))).strip()


def _title(soup) -> str:
    t = soup.find("title")
    return re.split(r"\s+[—|–-]\s+", _text(t))[0] if t else ""


def _pick(key: str, options: list[str]) -> str:
    return options[int(hashlib.sha256(key.encode()).hexdigest(), 16) % len(options)]


def _answer_after(heading) -> str:
    """The first paragraph under ``heading`` (and the next when the first is short)."""
    parts: list[str] = []
    for el in heading.find_all_next(["p", "h1", "h2", "h3", "h4", "h5", "h6", "dl", "pre"]):
        if el.name.startswith("h"):
            break
        if el.name != "p":
            if parts:
                break
            continue
        t = _text(el)
        if len(t) < 20:
            continue
        parts.append(t)
        if sum(map(len, parts)) >= 120:
            break
    return " ".join(parts)[:MAX_CHARS]


def _heading_items(soup) -> list[tuple[str, str]]:
    items = []
    for h in soup.find_all(["h2", "h3", "h4", "h5"]):
        q = _text(h)
        if not (q.endswith("?") or _HOW_TO.match(q)) or not _QUESTION.match(q) or not (10 <= len(q) <= 160):
            continue
        if not q.endswith("?"):
            q = re.sub(r"^how to\b", "How do I", q, flags=re.I) + "?"
        a = _answer_after(h)
        if len(a) >= 40:
            items.append((q, a))
    return items


_SECTION = re.compile(r"^(?:returns?|parameters?|yields?|raises?|attributes?|see also|notes?|examples?|type|default)\b", re.I)


def _ask(term: str, page: str) -> str:
    if ", default" in term or " : " in term or re.match(r"^\w+ (?:int|float|str|bool|array|dict|list|tuple|callable)", term):
        term = term.split()[0].rstrip(",:")  # numpydoc "name : type, default=..." asks for the name
    if term.startswith("-"):
        opt = max(re.findall(r"--?[\w][\w-]*", term) or [term], key=len)
        return _pick(term + page, [f"What does {opt} do?", f"What is the {opt} option for?",
                                   f"What does the {opt} option of {page} do?"])
    m = re.match(r"^(?:(?:class|method|function|attribute|property|exception|static|abstract|async)\s+)*([\w.]+)\s*\(?", term)
    if m and ("(" in term or "." in m.group(1)):
        name = m.group(1).rsplit(".", 1)[-1] or m.group(1)
        return _pick(term + page, [f"What does {name} do?", f"What is {name} used for?", f"What is {name} in {page}?"])
    return _pick(term + page, [f"What is {term}?", f"What does {term} mean?", f"What is a {term} in {page}?"])


def _dl_items(soup, page: str) -> list[tuple[str, str]]:
    items = []
    for dt in soup.find_all("dt"):
        dd = dt.find_next_sibling("dd")
        if dd is None or dt.find_next_sibling(["dt", "dd"]) is not dd:
            continue  # one of several terms for one description: the last one asks
        term = _text(dt)
        p = dd.find("p")
        desc = _text(p if p is not None and len(_text(p)) >= 30 else dd)[:MAX_CHARS]
        if not (2 <= len(term) <= 80) or _SECTION.match(term) or len(desc) < 30 or term.lower() in desc.lower()[:40]:
            continue
        items.append((_ask(term, page), desc))
    return items


def mine_page(path: Path, corpus: str) -> list[dict]:
    soup = BeautifulSoup(path.read_bytes(), "lxml")
    for junk in soup(["script", "style", "nav", "header", "footer"]):
        junk.decompose()
    title = _title(soup) or path.stem
    page = path.stem.replace("_", " ")
    out = []
    for kind, items in (("heading", _heading_items(soup)), ("term", _dl_items(soup, page)[:PER_PAGE])):
        answers = list(dict.fromkeys(a for _, a in items))
        if len(answers) < 3:
            continue  # too few others on the page to be hard negatives
        for q, a in items:
            others = [x for x in answers if x != a]
            start = int(hashlib.sha256(q.encode()).hexdigest(), 16) % len(others)
            negs = (others[start:] + others[:start])[:MAX_NEG]
            out.append({"corpus": corpus, "page": str(path.name), "kind": kind, "question": q,
                        "positive": f"{title}: {a}", "negatives": [f"{title}: {n}" for n in negs]})
    return out


def main() -> None:
    OUT.parent.mkdir(parents=True, exist_ok=True)
    counts: dict[str, dict[str, int]] = {}
    with OUT.open("w", encoding="utf-8") as f:
        for c in CORPORA:
            if c.part != "dev" or c.name not in LICENCES:
                continue
            folder = fetch(c)
            n = {"heading": 0, "term": 0}
            items = [it for path in sorted(folder.rglob("*.html")) for it in mine_page(path, c.name)]
            terms = [it for it in items if it["kind"] == "term"]
            if len(terms) > PER_CORPUS:  # an even spread over the corpus's pages, not its first ones
                keep = set(range(0, len(terms), -(-len(terms) // PER_CORPUS)))
                terms = [it for i, it in enumerate(terms) if i in keep]
            for item in [it for it in items if it["kind"] == "heading"] + terms:
                    n[item["kind"]] += 1
                    f.write(json.dumps(item, ensure_ascii=False) + "\n")
            counts[c.name] = n
            print(c.name, n, flush=True)
    print(f"wrote {OUT}: {sum(sum(v.values()) for v in counts.values())} questions")


if __name__ == "__main__":
    main()
