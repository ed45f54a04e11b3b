"""The red team's passes side by side, per attacker position: the lab baseline, the default
server as it stood before the insider defences of #19 (screening and answer-time checks
off), and the default server, each with the maximally compliant model, on loopback.
Writes ``benchmarks/results/redteam.md``.

    python benchmarks/redteam_report.py [--kb ../shared/fixtures/lab-kb]

The same rows come from ``microrag redteam --target URL --keys admin=KEY`` against any
running server (it makes the other positions' keys itself); ``tests/redteam/test_redteam.py``
asserts what this prints (all land on the baseline, none on the default).
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from microrag_engine.redteam import lab
from microrag_engine.redteam.attacks import provisioned, run_all
from microrag_engine.redteam.compliant import serve
from microrag_engine.server.defences import HARDENED, LAB, Defences, Profile

OUT = Path(__file__).parent / "results" / "redteam.md"
BEFORE = Profile("before-19", replace(Defences(), screening=False, answer_checks=False, provenance_prior=False))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kb", default=str(Path(__file__).parents[1] / ".." / "shared" / "fixtures" / "lab-kb"))
    args = ap.parse_args()
    logging.disable(logging.WARNING)
    model = serve()
    url = f"http://127.0.0.1:{model.server_address[1]}"
    runs = {}
    for name, profile in (("lab-baseline", LAB), ("before #19", BEFORE), ("default", HARDENED)):
        tmp = Path(tempfile.mkdtemp(prefix="redteam-"))
        probe = tmp / "tools" / "hostname"
        probe.parent.mkdir()
        probe.write_text("PROBE-HOST-7f3a9c")
        server, target, keys = lab.start(tmp, profile, url, Path(args.kb), tools_dir=probe.parent)
        t0 = time.monotonic()
        try:
            # The hardened passes get the admin key only, as an operator would give it: the red
            # team makes the other positions' keys itself.
            with provisioned(target, {} if profile is LAB else {"admin": keys["admin"]}) as every:
                runs[name] = (run_all(target, every, Path(args.kb), probe), time.monotonic() - t0)
        finally:
            server.should_exit = True
    model.shutdown()
    names = list(runs)
    by = {n: {(r["attack"], r["position"]): r for r in runs[n][0]} for n in names}
    order = list(dict.fromkeys(k for n in reversed(names) for k in by[n]))
    lines = ["| attack | position | attempts | " + " | ".join(f"{n} successes" for n in names) + " | what stopped it (default) |",
             "|---|---|---|" + "---|" * len(names) + "---|"]
    for key in order:
        rows = [by[n].get(key) for n in names]
        d = by["default"].get(key) or {}
        lines.append(f"| {key[0]} | {key[1]} | {d.get('attempts', '-')} | "
                     + " | ".join(str(r["successes"]) if r else "-" for r in rows) + f" | {d.get('defence', '-')} |")
    totals = []
    for n in names:
        per: dict[str, list[int]] = {}
        for r in runs[n][0]:
            per.setdefault(r["position"], [0, 0])
            per[r["position"]][0] += r["successes"]
            per[r["position"]][1] += r["attempts"]
        totals.append(f"- **{n}** ({runs[n][1]:.0f} s): " + ", ".join(f"{p} {s}/{a}" for p, (s, a) in per.items()))
    lines += ["", "Successes / attempts by position:", "", *totals, "",
              "`-`: not run in that pass (the lab baseline has no keys: every attack runs anonymously there). "
              "Positions: `caller` = the attacks of a caller (anonymous or reader), the others = who uploads the "
              "hostile content (`operator` = a hostile third-party file arriving through the admin key).",
              f"\n{time.strftime('%Y-%m-%d')}, `python benchmarks/redteam_report.py`"]
    OUT.write_text("# Red team: lab baseline, the default before #19, and the default, per position\n\n"
                   + "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
