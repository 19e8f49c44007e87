"""The README's examples run as written (only the server's address is the test server's)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from typing import Any

import httpx
from helpers import is_free

import leasehold

README = os.path.join(os.path.dirname(__file__), os.pardir, "README.md")
DEFAULT = "http://127.0.0.1:8080"


def quickstart_blocks() -> list[str]:
    text = open(README, encoding="utf-8").read()
    section = text.split("\n## Quickstart\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 3, "the quickstart has a sync, an async and a whole-job example"
    return blocks


def run_as_script(code: str, url: str) -> str:
    assert DEFAULT in code
    result = subprocess.run(
        [sys.executable, "-c", code.replace(DEFAULT, url)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_the_quickstart_runs(url: str, raw: httpx.Client) -> None:
    sync_block, async_block, _ = quickstart_blocks()
    assert len([line for line in sync_block.splitlines() if line.strip()]) == 4  # import + 3 lines
    for block in (sync_block, async_block):
        out = run_as_script(block, url)
        assert re.match(r"holding nightly-report with fencing token \d+\n$", out), out
    assert is_free(raw, "nightly-report")


def test_the_whole_job_runs(url: str, admin: leasehold.Client, raw: httpx.Client) -> None:
    job = quickstart_blocks()[2]
    writes: list[Any] = []

    class Database:
        def write(self, batch: Any, fencing_token: int) -> None:
            writes.append((batch, fencing_token))

    with leasehold.Client(url) as client:
        scope: dict[str, Any] = {"client": client, "batches": ["a", "b", "c"], "db": Database()}
        exec(compile(job, "README.md", "exec"), scope)
        assert [batch for batch, _ in writes] == ["a", "b", "c"]
        assert len({token for _, token in writes}) == 1
        assert is_free(raw, "nightly-report")

        # The job stops at its next step once the lease is lost.
        writes.clear()

        class LosingDatabase(Database):
            def write(self, batch: Any, fencing_token: int) -> None:
                super().write(batch, fencing_token)
                admin.force_release("nightly-report")
                leases = [v for v in scope.values() if isinstance(v, leasehold.Lease)]
                assert leases[0].lost.wait(5)

        scope = {"client": client, "batches": ["a", "b", "c"], "db": LosingDatabase()}
        try:
            exec(compile(job, "README.md", "exec"), scope)
        except leasehold.LeaseLost as e:
            assert e.reason == "force_released"
        else:
            raise AssertionError("the job should have ended in LeaseLost")
        assert [batch for batch, _ in writes] == ["a"]
