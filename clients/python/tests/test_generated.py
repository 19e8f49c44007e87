"""The blocking client is generated from the asyncio one (scripts/generate_sync.py, unasync):
the committed src/leasehold/_sync must be exactly what src/leasehold/_async makes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "generate_sync.py"


def test_the_sync_client_is_generated_from_the_async_one() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
