"""evaluate_nli.py: the verifier's measured figures still hold (Pyserini-style regression).

``benchmarks/verify_report.py --write`` records full-set figures (the table in docs/asking/verification.md)
and 200-row samples; this test recomputes the samples with the shipped model.
"""

from __future__ import annotations

import json

from conftest import ROOT, SHARED, needs_models, needs_shared

EXPECTED = ROOT / "benchmarks" / "expected"
TOL = 0.005


def _flat(d: dict, prefix: str = "") -> dict[str, float]:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[f"{prefix}{k}"] = float(v)
    return out


@needs_models
@needs_shared
def test_sample_figures_reproduce():
    import evaluate_nli as ev

    from microrag_engine.config import PRESETS
    from microrag_engine.engine import Engine, demo_corpus
    from microrag_engine.verify.nli import load_nli

    expected = json.loads((EXPECTED / "nli-sample.json").read_text())
    engine = Engine.from_paths([demo_corpus()], PRESETS["default"])
    got = ev.measure(load_nli("shipped"), SHARED / "datasets", limit=expected["limit"], engine=engine)
    want, have = _flat({k: v for k, v in expected.items() if k not in ("limit", "command", "note")}), _flat(got)
    drift = {k: (want[k], have.get(k)) for k in want if have.get(k) is None or abs(have[k] - want[k]) > TOL}
    assert not drift, f"figures moved (expected, got): {drift}"


def test_docs_table_matches_the_recorded_figures():
    fig = json.loads((EXPECTED / "nli.json").read_text())
    page = (ROOT / "docs" / "asking" / "verification.md").read_text()
    for name in ("mnli_m_gold", "snli_test", "healthver_test"):
        assert f"{fig[name]['accuracy']:.3f}" in page, f"verification.md lacks the {name} accuracy from expected/nli.json"
    assert f"{fig['scifact_test']['support_entailed']:.3f}" in page


@needs_shared
def test_calibration_never_reads_a_reported_set():
    import evaluate_nli as ev

    claims_train = {s for _, s, _ in ev.scifact_items(SHARED / "datasets", "train")}
    claims_test = {s for _, s, _ in ev.scifact_items(SHARED / "datasets", "test")}
    assert claims_train and claims_test and not claims_train & claims_test
