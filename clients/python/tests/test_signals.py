"""Ctrl-C and SIGTERM end a process holding a lock: the lock is released on the way out,
not left to its TTL (30 s here)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import httpx
import pytest
from helpers import is_free, lease_state

HOLD = os.path.join(os.path.dirname(__file__), "hold.py")


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_releases(url: str, raw: httpx.Client, name: str, mode: str, signum: int) -> None:
    process = subprocess.Popen(
        [sys.executable, HOLD, url, name, mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # As from a terminal: test.sh runs pytest as a background job, whose children
        # start with SIGINT ignored.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert process.stdout is not None
        lease_id = process.stdout.readline().strip()
        assert lease_id, process.stderr.read() if process.stderr else ""
        assert lease_state(raw, name, lease_id) == "held"
        process.send_signal(signum)
        code = process.wait(10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    if signum == signal.SIGTERM:
        assert code == 128 + signal.SIGTERM  # SystemExit(143): it unwound, it was not killed
    else:
        assert code in (-signal.SIGINT, 1, 128 + signal.SIGINT)  # KeyboardInterrupt
    assert lease_state(raw, name, lease_id) == "released"
    assert is_free(raw, name)
