"""Linear-time regular expressions for text we do not control.

In:  a pattern in RE2 syntax. Out: a compiled RE2 pattern (``search``, ``finditer``,
``sub``, ``split`` as in ``re``).

Python's ``re`` backtracks: a pattern whose quantifiers can split the same input in
many ways takes exponential time (``(?:[\\w](?:[ _]{1,3}))+`` on a run of underscores),
and a search that restarts at every position of a long run takes quadratic time
(``\\s*<`` on 32k spaces). RE2 runs in time linear in the input for every pattern it
accepts, so every regex that reads documents, queries, uploads or model output is
compiled here; ``tests/test_rx.py`` feeds each one adversarial repetitions and fails
on super-linear growth.

What RE2 does not do, and how patterns here cope:
* no lookaround: capture the boundary character and put it back, or test afterwards;
* ``\\w \\d \\s \\b`` are ASCII: write ``[\\pL\\pN_]``, ``SPACE``, ``DIGIT`` where Unicode matters;
* no named-group spans (``m.start("v")``): use group numbers;
* flags are inline (``(?i)``, ``(?s)``).
"""

from __future__ import annotations

import re2

# Python's Unicode \s and \d (write [\pL\pN_] for \w), for patterns whose behaviour must not change on
# non-ASCII text (RE2's own classes are ASCII).
SPACES = r"\t\n\x0b\f\r\x1c-\x1f \x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}"
SPACE = rf"[{SPACES}]"
DIGIT = r"\p{Nd}"


def compile(pattern: str) -> re2._Regexp:  # noqa: A001 - mirrors re.compile
    """A compiled RE2 pattern; raises ``re2.error`` for syntax RE2 cannot run in linear time."""
    return re2.compile(pattern)
