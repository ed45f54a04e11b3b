"""Both red-team passes side by side: every attack family against the lab baseline and the
default server, with the maximally compliant model, on loopback. Writes
``benchmarks/results/redteam.md``.

    python benchmarks/redteam_report.py [--kb ../shared/fixtures/lab-kb]

The same rows come from ``microrag redteam --target URL`` against any running server;
``tests/redteam/test_redteam.py`` asserts what this prints (all land / none land).
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path

from microrag_engine.redteam import lab
from microrag_engine.redteam.attacks import run_all
from microrag_engine.redteam.compliant import serve
from microrag_engine.server.defences import HARDENED, LAB

OUT = Path(__file__).parent / "results" / "redteam.md"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kb", default=str(Path(__file__).parents[1] / ".." / "shared" / "fixtures" / "lab-kb"))
    args = ap.parse_args()
    logging.disable(logging.WARNING)
    model = serve()
    url = f"http://127.0.0.1:{model.server_address[1]}"
    runs = {}
    for name, profile in (("lab-baseline", LAB), ("default", HARDENED)):
        tmp = Path(tempfile.mkdtemp(prefix=f"redteam-{name}-"))
        probe = tmp / "tools" / "hostname"
        probe.parent.mkdir()
        probe.write_text("PROBE-HOST-7f3a9c")
        server, target, keys = lab.start(tmp, profile, url, Path(args.kb), tools_dir=probe.parent)
        t0 = time.monotonic()
        try:
            runs[name] = (run_all(target, {} if profile is LAB else keys, Path(args.kb), probe),
                          time.monotonic() - t0)
        finally:
            server.should_exit = True
    model.shutdown()
    base, t_base = runs["lab-baseline"]
    default, t_default = runs["default"]
    lines = ["| attack | attempts (baseline / default) | lab-baseline successes | default successes | what stopped it (default) |",
             "|---|---|---|---|---|"]
    for b, d in zip(base, default):
        lines.append(f"| {b['attack']} | {b['attempts']} / {d['attempts']} | {b['successes']} | {d['successes']} | {d['defence']} |")
    lines.append(f"\nbaseline pass {t_base:.0f} s, default pass {t_default:.0f} s "
                 f"({time.strftime('%Y-%m-%d')}, `python benchmarks/redteam_report.py`)")
    OUT.write_text("# Red team: lab baseline vs default\n\n" + "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
