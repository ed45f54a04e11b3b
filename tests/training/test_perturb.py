"""perturb.py: each rule changes exactly the fact it names, and rag_pairs labels rows consistently."""

from __future__ import annotations

import random

import perturb as P
import pytest

S = "Employees receive 20 vacation days per year and can carry over 5 days until March 31, 2025."


def rng() -> random.Random:
    return random.Random(0)


def test_number_changes_a_number_but_not_the_year():
    out = P.swap_number(S, rng())
    assert out != S and "2025" in out and ("20 vacation" not in out or "over 5 " not in out)


def test_date_moves_a_year_or_month():
    out = P.swap_date(S, rng())
    assert out != S and ("2025" not in out or "March" not in out)
    assert P.swap_date("No dates here at all.", rng()) is None


@pytest.mark.parametrize("src, expected", [
    ("The portal is available off the VPN.", "The portal is not available off the VPN."),
    ("You cannot reuse old passwords.", "You can reuse old passwords."),
    ("Deploys are not allowed on Fridays.", "Deploys are allowed on Fridays."),
])
def test_negate_flips_polarity(src, expected):
    assert P.negate(src, rng()) == expected


def test_negate_avoids_double_negatives():
    assert P.negate("Neither version was a success.", rng()) is None


def test_antonym_and_entity():
    assert P.swap_antonym("Latency increased sharply.", rng()) == "Latency decreased sharply."
    assert P.swap_antonym("Latency increased after the deploy.", rng()) in (
        "Latency decreased after the deploy.", "Latency increased before the deploy.")
    out = P.swap_entity("The plan is run by Cascade Health in Oregon.", ["Northgate Retirement"], rng())
    assert "Northgate Retirement" in out


def test_paraphrase_keeps_the_facts():
    out = P.paraphrase("Employees must use the portal (see the wiki) to purchase equipment.", rng())
    assert out and "(see the wiki)" not in out and "portal" in out


def test_rag_pairs_labels_match_kinds():
    passages = [["Alice founded Acme Corp in 1999 in Boston.", "The company makes 40 kinds of widgets."],
                ["Bob runs the Paris office since 2010.", "It is not open on Sundays."]]
    rows = P.rag_pairs(passages, random.Random(1), per_passage=30)
    assert rows
    for r in rows:
        want = {"copy": "entailment", "paraphrase": "entailment", "unrelated": "neutral"}.get(r["kind"], "contradiction")
        assert r["label"] == want
        if r["kind"] == "copy":
            assert r["hypothesis"] in r["premise"]
        if r["label"] == "contradiction":
            assert r["hypothesis"] not in r["premise"]
