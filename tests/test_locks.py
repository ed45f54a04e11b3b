"""requirements/*.lock and constraints.txt: one tested set of versions, stated everywhere alike.

`make demo` and `make test` share one venv, so the demo and build locks must pin exactly the
test lock's versions; constraints.txt (for library users) must be that same set.
"""

from __future__ import annotations

import re

import pytest

from conftest import ROOT

REQ = ROOT / "requirements"
PIN = re.compile(r"^([A-Za-z0-9_.-]+)==(\S+)", re.M)


def _pins(path) -> dict[str, str]:
    return {name.lower().replace("_", "-"): version for name, version in PIN.findall(path.read_text())}


@pytest.mark.parametrize("lock", ["demo.lock", "build.lock"])
def test_smaller_locks_pin_the_test_locks_versions(lock):
    test, small = _pins(REQ / "test.lock"), _pins(REQ / lock)
    assert small and {k: v for k, v in small.items() if k in test and test[k] != v} == {}


def test_constraints_are_the_test_lock():
    assert _pins(ROOT / "constraints.txt") == _pins(REQ / "test.lock")


def test_every_pin_carries_a_hash():
    for lock in REQ.glob("*.lock"):
        text = lock.read_text()
        entries = re.split(r"\n(?=[A-Za-z0-9_.-]+==)", text)
        unhashed = [e.split()[0] for e in entries if PIN.match(e) and "--hash=sha256:" not in e]
        assert not unhashed, f"{lock.name}: {unhashed}"
