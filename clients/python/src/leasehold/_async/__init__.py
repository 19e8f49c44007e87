"""The asyncio client, and the source the blocking one (``_sync``) is generated from."""
