"""Sockets for tests."""

from __future__ import annotations

import socket
import subprocess
import time

import httpx


def free_port() -> int:
    """A loopback port nobody is listening on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_serving(url: str, path: str = "/health", within: float = 90, proc: subprocess.Popen | None = None) -> None:
    """Block until ``url + path`` answers 200; AssertionError (with the process's stderr when
    it exited) after ``within`` seconds or if ``proc`` exits first."""
    deadline = time.time() + within
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the server exited ({proc.returncode}): {proc.stderr.read() if proc.stderr else ''}")
        try:
            if httpx.get(url + path, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{url}{path} did not answer 200 within {within:.0f} s")
