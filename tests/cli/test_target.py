"""``--target URL``: retrieve, ask, ingest, documents and delete against a real server, printed as locally."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("fastapi", reason="server extra not installed")

from conftest import needs_models, run_cli  # noqa: E402
from helpers.net import free_port  # noqa: E402
from helpers.server import Running  # noqa: E402
from microrag_engine.cli.main import main  # noqa: E402
from microrag_engine.client import Client  # noqa: E402

pytestmark = needs_models

VACATION = "How many vacation days do employees get?"


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    s = Running(tmp_path_factory.mktemp("target"), rate_per_minute=100_000)
    yield s
    s.stop()


@pytest.fixture
def cli(capsys, monkeypatch):
    """``microrag ARGS`` in this process: (exit code, stdout, stderr)."""
    monkeypatch.delenv("MICRORAG_API_KEY", raising=False)

    def run(*args: str) -> tuple[int, str, str]:
        code = main(list(args))
        out, err = capsys.readouterr()
        return code, out, err
    return run


def test_retrieve_prints_the_servers_hits_like_local_ones(srv, cli):
    code, out, err = cli("retrieve", VACATION, "--target", srv.url, "--top-k", "2")
    assert code == 0, err
    first = out.splitlines()[0]
    assert first.startswith("[") and "kw=" in first and "em=" in first and first.endswith("] leave.md · chunk 0")
    assert out.count(" · chunk ") <= 2
    code, out, _ = cli("retrieve", VACATION, "--target", srv.url, "--json", "--where", "path=leave*")
    hits = json.loads(out)
    assert {h["doc"] for h in hits} == {"leave.md"} and {"id", "hybrid", "kw", "em", "text"} <= set(hits[0])
    code, out, _ = cli("retrieve", "What is the capital of France?", "--target", srv.url)
    assert code == 0 and out.startswith("REFUSE: ")


def test_ask_streams_the_servers_answer_with_sources(srv, cli, monkeypatch):
    streamed = []
    real = Client.stream

    def spy(self, *args, **kwargs):
        for event in real(self, *args, **kwargs):
            streamed.append(event)
            yield event
    monkeypatch.setattr(Client, "stream", spy)
    code, out, err = cli("ask", VACATION, "--target", srv.url, "--verify")
    assert code == 0, err
    assert len(streamed) > 3  # the answer came through the event stream, piece by piece
    said = out.split("\nVerification:")[0]  # the answer; the verifier's rows quote its own sentences
    assert "[1]" in said and "[source:" not in said and "asking the server at" in err
    assert "\nVerification: 2/2 sentences supported" in out and "✓ supported" in out
    assert "\nSources:\n  1. Leave — leave.md · chunk 0\n" in out  # cited only, by number
    code, out, _ = cli("ask", "What is the capital of France?", "--target", srv.url, "-q")
    assert code == 0 and out.startswith("The indexed documents don't cover that.") and "Sources:" not in out


def test_ask_json_has_the_local_keys(srv, cli, tmp_path):
    code, out, _ = cli("ask", VACATION, "--target", srv.url, "--json")
    data = json.loads(out)
    assert code == 0 and {"answer", "mode", "refused", "reason", "truncated", "sources", "verification"} <= set(data)
    assert data["sources"][0]["doc"] == "leave.md" and not data["refused"] and data["mode"] == "extractive"
    # The answerer's refusal (the gate let it through) says so in the same keys, here and locally.
    odd = "How many vacation days does the kubernetes operator rotate?"
    code, out, _ = cli("ask", odd, "--target", srv.url, "--json")
    remote = json.loads(out)
    assert code == 0 and remote["refused"] is True and remote["reason"]
    public = tmp_path / "public"
    public.mkdir()
    for name in ("vpn.md", "leave.md", "deploy.md"):  # what the server's anonymous caller reads
        (public / name).write_text((srv.corpus / name).read_text())
    code, out, _ = cli("ask", odd, "--corpus", str(public), "--json")
    local = json.loads(out)
    assert code == 0 and local["refused"] is True and local["reason"] == remote["reason"]


def test_ingest_documents_and_delete_through_the_server(srv, cli, tmp_path, monkeypatch):
    notes = tmp_path / "notes"
    (notes / "sub").mkdir(parents=True)
    (notes / "canteen.md").write_text("# Canteen\n\nThe canteen serves lunch from noon until 2pm.")
    (notes / "sub" / "parking.md").write_text("# Parking\n\nVisitor parking is on level -2.")
    (notes / "scan.pdf").write_bytes(b"%PDF-1.7\n\xff\xfe\x00")
    monkeypatch.setenv("MICRORAG_API_KEY", srv.key["trusted"])  # the environment's key: no --key needed
    code, out, err = cli("ingest", str(notes), "--target", srv.url)
    assert code == 0, err
    me = srv.names["trusted"]
    assert f"live: @{me}/notes/canteen.md (public, 1 chunks)" in out and f"live: @{me}/notes/sub/parking.md" in out
    assert "uploaded 2 document(s), 2 live, 0 waiting" in out and "skipped" in err and "scan.pdf" in err
    code, out, _ = cli("documents", "--target", srv.url)
    line = next(x for x in out.splitlines() if x.startswith(f"@{me}/notes/canteen.md\t"))
    assert line.split("\t")[1:4] == ["1 chunks", "public", f"api:{me}"]
    code, out, _ = cli("retrieve", "when does the canteen serve lunch?", "--target", srv.url, "--top-k", "1")
    assert f"@{me}/notes/canteen.md · chunk 0" in out
    code, out, _ = cli("delete", f"@{me}/notes/canteen.md", f"@{me}/notes/sub/parking.md", "--target", srv.url, "--json")
    assert json.loads(out)["removed"] == [f"@{me}/notes/canteen.md", f"@{me}/notes/sub/parking.md"]
    # an untrusted contributor's upload waits for review; --key beats the environment
    code, out, _ = cli("ingest", str(notes / "canteen.md"), "--target", srv.url, "--key", srv.key["contrib"],
                       "--collection", "food", "--json")
    up = json.loads(out)["uploaded"][0]
    assert up["status"] == "quarantined" and up["doc"] == f"@{srv.names['contrib']}/food/canteen.md"


@pytest.mark.parametrize("args, needle", [
    (["retrieve", "q", "--corpus", "docs/"], "--corpus does nothing with --target"),
    (["ask", "q", "--preset", "seed"], "--preset does nothing with --target"),
    (["ask", "q", "--policy", "drop"], "--policy does nothing with --target"),
    (["retrieve", "q", "--labels", "restricted"], "--labels does nothing with --target: your key's clearance decides"),
    (["ingest", "docs/", "--prune"], "--prune does nothing with --target"),
    (["documents", "--index", "ix/"], "--index does nothing with --target"),
    (["retrieve", "q", "--where", "path=a*", "--where", "path=b*"], "given twice"),
])
def test_local_options_with_target_are_one_line_errors(cli, args, needle):
    code, out, err = cli(*args, "--target", "http://127.0.0.1:9")
    assert code == 2 and err.startswith("microrag: error: ") and needle in err and err.count("\n") == 1


def test_key_without_target_is_an_error(cli):
    code, _, err = cli("documents", "--key", "mrg_x_y")
    assert code == 2 and "--key is for a server: give its URL with --target" in err


def test_server_refusals_and_unreachable_servers_are_one_line(srv):
    secret = "mrg_deadbeef_WRONG-SECRET"
    proc = run_cli("documents", "--target", srv.url, env={"MICRORAG_API_KEY": secret})
    assert proc.returncode == 2 and proc.stderr == "microrag: error: the server says: invalid or revoked API key (HTTP 401)\n"
    assert secret not in proc.stdout + proc.stderr
    proc = run_cli("ingest", "src/", "--target", srv.url, "--key", srv.key["reader"])
    assert proc.returncode == 2 and "this needs the contributor role (HTTP 403)" in proc.stderr and "Traceback" not in proc.stderr
    url = f"http://127.0.0.1:{free_port()}"
    proc = run_cli("ask", "q", "--target", url, "--key", secret)
    assert proc.returncode == 3 and proc.stderr.endswith(f"microrag: error: cannot reach {url}: connection refused\n")
    assert secret not in proc.stderr and "Traceback" not in proc.stderr
