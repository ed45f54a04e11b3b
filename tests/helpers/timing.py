"""Timing for growth checks: how time scales with input, never an absolute figure."""
from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable

# Each timing covers at least this much CPU work: a call of 1.5 ms measured 30 ms once on a
# busy AMD machine (x20 for x4 the input), because at millisecond scale a cache flush or a
# frequency step is the whole measurement. Repeating the call until the floor is covered
# and dividing lifts the figure above that noise.
FLOOR_S = 0.05


def best_time(fn: Callable[[], object], repeats: int = 3, stop_after: float = float("inf"), collect: bool = True,
              floor: float = FLOOR_S) -> float:
    """Best of ``repeats`` timings of ``fn()`` in CPU seconds of this process per call, with
    the garbage collector paused. A fast ``fn`` runs as many times per timing as covers
    ``floor`` seconds (counted from a first, warm-up call).

    Why CPU time: wall time counts the moments another process held the core. On a loaded
    2-core machine (a benchmark next door) a linear parse measured 12x for 4x the input by the
    wall clock; the CPU time this process spent does not include the waiting.

    Why paused: CPython's full collections walk every live object, and a parser that builds
    a big tree triggers more of them the bigger the tree, so with the collector on, a linear
    parser measured ~5x for 4x the input here and 10.3x on a CI machine. The growth checks are
    about the algorithm, not the collector's schedule.

    ``collect=False`` in a forked child: a collection there runs finalizers that may wait on a
    lock another thread of the parent held at fork time, forever (it hung test_rx in make test)."""
    best = float("inf")
    if collect:
        gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        t = time.process_time()
        fn()
        first = time.process_time() - t
        if first > stop_after:
            return first
        calls = max(1, min(10_000, math.ceil(floor / max(first, 1e-6))))
        for _ in range(repeats):
            t = time.process_time()
            for _ in range(calls):
                fn()
            best = min(best, (time.process_time() - t) / calls)
            if best > stop_after:
                break
    finally:
        if enabled:
            gc.enable()
    return best
