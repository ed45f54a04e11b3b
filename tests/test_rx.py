"""rx.py and every regex in the package: no input makes a pattern take super-linear time.

Each module-level pattern of ``microrag_engine`` (found by walking the package, so a
new one is covered without editing this file) and each guard entry point gets
adversarial repetitions drawn by hypothesis: a short unit of the characters regexes
treat specially, repeated to N and 8N characters, plus a tail. A linear pattern takes
about 8x longer on the long input; a quadratic one 64x; an exponential one never
returns, so every example runs in a forked child that is killed after a ceiling.
Thresholds are generous on purpose (no tight timer): fail when the long input takes
over 5 s, or over 200 ms while growing more than 24x (3x the linear ratio).
"""

from __future__ import annotations

import importlib
import multiprocessing as mp
import pkgutil
import re

import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

import microrag_engine
from helpers.timing import best_time
from microrag_engine import guard, rx

try:
    from microrag_engine.server import defences
except ImportError:  # the server extra is missing
    defences = None

N = 4_000
GROWTH = 8
CEILING_S = 5.0
FLOOR_S = 0.2
MAX_RATIO = 3 * GROWTH
HANG_S = 60.0
# Characters that regexes give meaning to: separators, word characters, brackets,
# quotes, the "@"/"." of e-mails, digits of phones, path and markup characters.
ALPHABET = " \t\n_-.aZ1@:=()[]{}<>\"'`/\\#*|!?,;+%~é\u200b"


# The lab baseline's deliberately backtracking de-spacer (red team #1): the one pattern
# exempt, and the positive control that shows this test catches a backtracking pattern.
NAIVE = {id(p) for p in defences.NAIVE_PATTERNS} if defences else set()


def _patterns() -> list[tuple[str, object]]:
    found: dict[int, tuple[str, object]] = {}
    for info in pkgutil.walk_packages(microrag_engine.__path__, "microrag_engine."):
        if info.name.endswith(".__main__"):  # importing it runs the CLI
            continue
        try:
            mod = importlib.import_module(info.name)
        except ImportError:  # an optional extra is missing: its patterns are not reachable either
            continue
        for attr, value in vars(mod).items():
            items = value if isinstance(value, (list, tuple)) else [value]
            for item in items:
                for obj in (item if isinstance(item, tuple) else (item,)):
                    if (isinstance(obj, re.Pattern) or type(obj).__name__ == "_Regexp") and id(obj) not in NAIVE:
                        found.setdefault(id(obj), (f"{info.name}.{attr}", obj))
    return sorted(found.values(), key=lambda x: x[0])


PATTERNS = _patterns()
# Warm every lazy cache before any fork: the children then import and load nothing, so a
# lock some other thread of this process held at fork time cannot stall them.
guard.redact("warm up: x@y.z")
guard.injection_check("warm up")
ENTRY_POINTS = [("guard.canonical", guard.canonical), ("guard.redact", lambda s: guard.redact(s)),
                ("guard.injection_check", guard.injection_check)]


def _worst(unit: str, tail: str, conn, only: tuple[tuple[str, object], ...] = ()) -> None:
    """In the child: the worst (name, t_small, t_big) over every pattern and entry point
    (or over the patterns ``only``)."""
    reps = max(1, N // len(unit))
    small = unit * reps + tail
    big = unit * (GROWTH * reps) + tail
    calls = [(name, lambda s, p=p: [m.span() for m in p.finditer(s)]) for name, p in (only or PATTERNS)]
    calls += [] if only else ENTRY_POINTS
    worst = ("", 0.0, 0.0)
    for name, fn in calls:
        t_small, t_big = _best_of(2, fn, small), _best_of(2, fn, big)  # best of 2: a busy core only adds time
        bad = t_big > CEILING_S or (t_big > FLOOR_S and t_big / max(t_small, 1e-4) > MAX_RATIO)
        if bad or t_big > worst[2]:
            worst = (name, t_small, t_big)
            if bad:
                break
    conn.send(worst)


def _best_of(k: int, fn, text: str) -> float:
    return best_time(lambda: fn(text), repeats=k, stop_after=CEILING_S, collect=False, floor=0.0)  # runs in a forked child


def _measure(unit: str, tail: str, hang_s: float = HANG_S, only: tuple = ()) -> tuple[str, float, float]:
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_worst, args=(unit, tail, child, only))
    proc.start()
    if not parent.poll(hang_s):
        proc.kill()
        proc.join()
        pytest.fail(f"a pattern did not return within {hang_s:.0f} s on {unit!r} * n + {tail!r} (exponential?)")
    proc.join()
    return parent.recv()


def test_the_package_patterns_are_found():
    names = {n for n, _ in PATTERNS}
    assert "microrag_engine.guard._SPACED" in names and "microrag_engine.dlp.SHAPES" in names
    assert len(PATTERNS) >= 30


@settings(max_examples=25, deadline=None, derandomize=True, phases=[Phase.explicit, Phase.generate])
@given(unit=st.text(alphabet=ALPHABET, min_size=1, max_size=3), tail=st.text(alphabet=ALPHABET, max_size=3))
def test_no_pattern_grows_super_linearly(unit, tail):
    name, t_small, t_big = _measure(unit, tail)
    assert t_big <= CEILING_S and (t_big <= FLOOR_S or t_big / max(t_small, 1e-4) <= MAX_RATIO), (
        f"{name}: {N} chars {t_small * 1e3:.1f} ms -> x{GROWTH}: {t_big * 1e3:.1f} ms "
        f"on {unit!r} * n + {tail!r}")


def _own_words() -> list[tuple[tuple[str, object], str]]:
    """(pattern, unit) for each backtracking (``re``) pattern and each literal word of its own
    followed by a character patterns give meaning to: "read_file(" repeated with no ")" was
    quadratic in tools.CALL (48 s for 200k characters), and no unit from the alphabet spells a
    pattern's words."""
    out = []
    for name, p in PATTERNS:
        if isinstance(p, re.Pattern):
            for word in sorted(set(re.findall(r"(?<![\\])\b[A-Za-z_]{3,}\b", p.pattern))):
                out += [((name, p), word + after) for after in "( :'"]
    return out


@pytest.mark.parametrize("pattern,unit", _own_words(), ids=lambda v: v if isinstance(v, str) else v[0])
def test_no_backtracking_pattern_grows_super_linearly_on_its_own_words(pattern, unit):
    name, t_small, t_big = _measure(unit, "", only=(pattern,))
    assert t_big <= CEILING_S and (t_big <= FLOOR_S or t_big / max(t_small, 1e-4) <= MAX_RATIO), (
        f"{name}: {t_small * 1e3:.1f} ms -> x{GROWTH}: {t_big * 1e3:.1f} ms on {unit!r} * n")


@pytest.mark.parametrize("text", ["_" * 80 + "aa", "signature: " + "_" * 3000 + " Date:", " " * 32_000 + "[at]x",
                                  "a" * 50_000 + "@", "1 " * 20_000])
def test_reported_inputs_finish(text):
    """The red team's inputs: 80 underscores froze the server; 32k spaces took 39 s."""
    name, _, t_big = _measure(text, "")
    assert t_big <= CEILING_S, name


@pytest.mark.skipif(defences is None, reason="server extra not installed")
def test_the_growth_check_catches_the_baseline_pattern():
    """Positive control: version one's de-spacer, kept only for the lab baseline, is caught."""
    global PATTERNS
    kept = PATTERNS
    PATTERNS = [("defences._NAIVE_SPACED", p) for p in defences.NAIVE_PATTERNS]
    try:
        with pytest.raises(pytest.fail.Exception, match="did not return"):
            _measure("_", "aa", hang_s=10.0)
    finally:
        PATTERNS = kept


def test_rx_refuses_backtracking_syntax():
    import re2

    with pytest.raises(re2.error):
        rx.compile(r"(?<!x)a")  # lookbehind: not something RE2 can run in linear time


@pytest.mark.parametrize("unit", ["| password | token |\n|---|---|\n", "| SSN |\n|---|\n| 536-22-8745 |\n", "password: x\n",
                                  "- name: DB_PASSWORD\n  value: ", "-----BEGIN PRIVATE KEY-----\n", "h:1:d:u:p\n",
                                  "4111 ", "DE89 ", "--password ", "define('AUTH_KEY', '", "LS0tLS1CRUdJTi", "0 12 34 "])
def test_dlp_structures_grow_linearly(unit):
    """The DLP's line and table walks, not only its patterns: repeated tables, key lines, numbers."""
    name, t_small, t_big = _measure(unit, "")
    assert t_big <= CEILING_S and (t_big <= FLOOR_S or t_big / max(t_small, 1e-4) <= MAX_RATIO), (
        f"{name}: {t_small * 1e3:.1f} ms -> x{GROWTH}: {t_big * 1e3:.1f} ms on {unit!r} * n")
