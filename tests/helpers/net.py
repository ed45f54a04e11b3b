"""Sockets for tests."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A loopback port nobody is listening on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
