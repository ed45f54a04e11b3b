"""microrag.toml: a command's options from a file, the command line over it, typos refused."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import needs_shared, run_cli
from microrag_engine.cli.config import hidden


def _write(tmp_path, text: str):
    path = tmp_path / "microrag.toml"
    path.write_text(text)
    return {"MICRORAG_CONFIG": str(path)}


@needs_shared
def test_the_file_sets_options_and_the_command_line_wins(tmp_path, seed_kb):
    env = _write(tmp_path, f'[retrieve]\npreset = "seed"\ncorpus = ["{seed_kb}"]\ntop-k = 2\njson = true\n')
    from_file = run_cli("retrieve", "reset password", env=env)
    assert from_file.returncode == 0, from_file.stderr
    assert len(json.loads(from_file.stdout)) == 2
    over = run_cli("retrieve", "--top-k", "3", "reset password", env=env)
    assert len(json.loads(over.stdout)) == 3
    named = tmp_path / "other.toml"  # --config names another file than $MICRORAG_CONFIG
    named.write_text(f'[retrieve]\npreset = "seed"\ncorpus = ["{seed_kb}"]\ntop-k = 1\njson = true\n')
    assert len(json.loads(run_cli("--config", str(named), "retrieve", "reset password", env=env).stdout)) == 1


@pytest.mark.parametrize(("text", "said"), [
    ("[serve]\nprot = 8000\n", "unknown option 'prot'"),
    ("[serve]\nport = \"many\"\n", "port"),
    ("[serve]\ninput-guard = \"maybe\"\n", "not one of flag, block, off"),
    ("[serve]\nno-anonymous = \"yes\"\n", "true or false"),
    ("[serve]\nport = [1, 2]\n", "single value"),
    ("serve = 1\n", "must be a table"),
    ("[serve\n", "not valid TOML"),
])
def test_a_wrong_file_is_one_line_naming_the_key_and_nothing_starts(tmp_path, text, said):
    proc = run_cli("serve", env=_write(tmp_path, text))
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("microrag: error: ") and said in lines[0], proc.stderr
    assert "microrag.toml" in lines[0] and "Traceback" not in proc.stderr


def test_config_show_prints_the_effective_options_without_secrets(tmp_path):
    env = _write(tmp_path, '[serve]\nport = 8081\nno-anonymous = true\nallowed-host = ["rag.example.com"]\n'
                           'index = "postgresql://bob:hunter2@db.example/kb"\n')
    env |= {"LLM_BASE_URL": "http://127.0.0.1:9", "LLM_API_KEY": "sk-SECRET-show"}
    proc = run_cli("config", "show", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    shown = json.loads(proc.stdout)
    assert shown["options"]["port"] == 8081 and shown["options"]["no_anonymous"] is True
    assert shown["options"]["allowed_host"] == ["rag.example.com"]
    assert shown["options"]["rate_per_minute"] == 120  # a default, where the file is silent
    text = run_cli("config", "show", env=env).stdout
    assert "port = 8081" in text and "[serve]" in text
    for out in (proc.stdout, text):
        assert "hunter2" not in out and "sk-SECRET-show" not in out
    assert run_cli("config", "show", "--port", "1", env=env).returncode != 0  # show owns only its options


_PLAIN = st.text(st.characters(blacklist_characters=":@/", blacklist_categories=("Cs",)), max_size=30)


@given(_PLAIN, st.text(st.characters(blacklist_characters="@/", blacklist_categories=("Cs",)), min_size=1, max_size=30))
def test_a_uris_password_never_survives_hidden(user, password):
    assert hidden("index", f"postgresql://{user}:{password}@host/db") == f"postgresql://{user}:***@host/db"
    assert hidden("standby", f"postgresql://{user}@host/db") == f"postgresql://{user}@host/db"  # no password: as is
    assert hidden("api_key", "sk-anything") == "***"
