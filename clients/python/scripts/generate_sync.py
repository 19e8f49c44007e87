"""Makes the blocking client (``src/leasehold/_sync/``) from the asyncio one
(``src/leasehold/_async/``) with unasync: ``async def`` becomes ``def``, ``await`` goes,
``async with``/``async for`` become ``with``/``for``, and the names below are swapped (the
asyncio runtime for the threads one, httpx's async client for its blocking one). The two
halves are then one source: edit ``_async/``, run this, commit both.

    python scripts/generate_sync.py          # writes src/leasehold/_sync/
    python scripts/generate_sync.py --check  # fails when _sync/ is not what _async/ makes
"""

from __future__ import annotations

import difflib
import shutil
import sys
import tempfile
from pathlib import Path

import unasync  # type: ignore[import-untyped]

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "leasehold"

#: Names unasync does not know to swap (it swaps __aenter__, __aexit__, async/await itself).
REPLACEMENTS = {
    "_async_runtime": "_sync_runtime",
    "AsyncClient": "Client",
    "AsyncLease": "Lease",
    "AsyncLeaseContext": "LeaseContext",
    "AsyncTerm": "Term",
    "AsyncCampaign": "Campaign",
    "AsyncBaseTransport": "BaseTransport",
    "aclose": "close",
    "aread": "read",
    "aiter_lines": "iter_lines",
}

HEADER = "# Generated from ../_async/{name} by scripts/generate_sync.py (unasync): edit that file, not this one.\n"


def generate(into: Path) -> dict[str, str]:
    """The generated files' texts, by name (made in a scratch copy under ``into``)."""
    source = into / "_async"
    shutil.copytree(PACKAGE / "_async", source, ignore=shutil.ignore_patterns("__pycache__"))
    files = sorted(str(p) for p in source.glob("*.py"))
    unasync.unasync_files(files, [unasync.Rule("/_async/", "/_sync/", additional_replacements=REPLACEMENTS)])
    return {p.name: HEADER.format(name=p.name) + p.read_text() for p in sorted((into / "_sync").glob("*.py"))}


def main() -> int:
    check = "--check" in sys.argv[1:]
    target = PACKAGE / "_sync"
    with tempfile.TemporaryDirectory() as scratch:
        made = generate(Path(scratch))
    stale = []
    for name, text in made.items():
        path = target / name
        current = path.read_text() if path.exists() else ""
        if current == text:
            continue
        if check:
            stale.append(name)
            diff = difflib.unified_diff(current.splitlines(True), text.splitlines(True), str(path), f"{path} (made)")
            sys.stderr.writelines(list(diff)[:40])
        else:
            target.mkdir(exist_ok=True)
            path.write_text(text)
    extra = sorted(p.name for p in target.glob("*.py") if p.name not in made) if target.exists() else []
    if check and (stale or extra):
        print(
            f"src/leasehold/_sync is stale ({', '.join(stale + extra)}): run python scripts/generate_sync.py",
            file=sys.stderr,
        )
        return 1
    for name in extra:
        (target / name).unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
