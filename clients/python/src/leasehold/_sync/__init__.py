# Generated from ../_async/__init__.py by scripts/generate_sync.py (unasync): edit that file, not this one.
"""The asyncio client, and the source the blocking one (``_sync``) is generated from."""
