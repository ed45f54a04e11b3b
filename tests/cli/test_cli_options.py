"""cli/: each command declares only its own options, and --json is honoured wherever accepted."""

from __future__ import annotations

import json

import pytest

from conftest import run_cli
from microrag_engine.cli.main import build_parser


def _options(command: list[str]) -> set[str]:
    parser = build_parser()
    sub = parser._subparsers._group_actions[0].choices[command[0]]  # argparse keeps subparsers here
    for word in command[1:]:
        sub = sub._subparsers._group_actions[0].choices[word]
    return {s for a in sub._actions for s in a.option_strings}


@pytest.mark.parametrize("command, foreign", [
    (["check"], "--top-k"), (["check"], "--fusion"), (["documents"], "--preset"),
    (["ingest"], "--w-kw"), (["ingest"], "--labels"), (["verify"], "--top-k"), (["verify"], "--corpus"),
    (["verify"], "--preset"), (["keys", "add"], "--json"), (["serve"], "--labels"), (["rank"], "--json"),
    (["eval"], "--labels"), (["local-llm"], "--index"), (["compliant-llm"], "--quiet"),
])
def test_a_flag_that_would_do_nothing_is_not_declared(command, foreign):
    assert foreign not in _options(command)


def test_verify_declares_only_what_it_uses():
    assert _options(["verify"]) == {"-h", "--help", "--context", "--answer", "--question", "--policy", "--nli",
                                    "--min-entail", "--json", "-q", "--quiet"}


def test_an_irrelevant_flag_is_an_error(tmp_path):
    proc = run_cli("check", "--index", str(tmp_path / "ix"), "--top-k", "3")
    assert proc.returncode == 2 and "unrecognized arguments: --top-k 3" in proc.stderr and "Traceback" not in proc.stderr


def test_json_is_honoured_by_check_documents_delete_and_keys(tmp_path):
    corpus = tmp_path / "docs"
    corpus.mkdir()
    (corpus / "a.md").write_text("# A\n\nThe VPN uses WireGuard on port 51820.")
    (corpus / "b.md").write_text("# B\n\nLunch is served at noon.")
    ix = str(tmp_path / "ix")
    assert run_cli("ingest", str(corpus), "--index", ix, "--preset", "seed", "-q").returncode == 0
    check = json.loads(run_cli("check", "--index", ix, "--json").stdout)
    assert check["ok"] and check["documents"] == 2 and check["problems"] == []
    docs = json.loads(run_cli("documents", "--index", ix, "--json").stdout)
    assert sorted(d["doc"] for d in docs) == ["docs/a.md", "docs/b.md"]  # ids carry their collection
    assert {d["collection"] for d in docs} == {"docs"} and dict(docs[0]["meta"])["title"] == "A"
    removed = json.loads(run_cli("delete", "docs/b.md", "--index", ix, "--json").stdout)
    assert removed["removed"] == ["docs/b.md"]
    assert run_cli("keys", "add", "rita", "--index", ix, "-q").returncode == 0
    keys = json.loads(run_cli("keys", "list", "--index", ix, "--json").stdout)
    assert [k["name"] for k in keys] == ["rita"] and all("key" not in k and "hash" not in k for k in keys)


def test_index_commands_are_a_group_too(tmp_path):
    """`microrag index check` is `microrag check`: one definition, two spellings."""
    assert _options(["index", "check"]) == _options(["check"])
    corpus = tmp_path / "docs"
    corpus.mkdir()
    (corpus / "a.md").write_text("# A\n\nThe VPN uses WireGuard on port 51820.")
    ix = str(tmp_path / "ix")
    assert run_cli("index", "ingest", str(corpus), "--index", ix, "--preset", "seed", "-q").returncode == 0
    assert json.loads(run_cli("index", "check", "--index", ix, "--json").stdout)["documents"] == 1


def test_reading_keys_creates_nothing(tmp_path):
    proc = run_cli("keys", "list", "--index", str(tmp_path / "nowhere"))
    assert proc.returncode != 0 and "microrag keys add" in proc.stderr and not (tmp_path / "nowhere").exists()
