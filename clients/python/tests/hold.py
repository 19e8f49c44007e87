"""Holds a lock until killed: `python hold.py URL NAME sync|async`. Prints the lease id."""

import asyncio
import sys
import threading

import leasehold


def main() -> None:
    url, name, mode = sys.argv[1:4]
    if mode == "sync":
        with leasehold.Client(url) as client:
            with client.lock(name, ttl_ms=30000) as lease:
                print(lease.lease_id, flush=True)
                threading.Event().wait()
    else:

        async def hold() -> None:
            async with leasehold.AsyncClient(url) as client:
                async with client.lock(name, ttl_ms=30000) as lease:
                    print(lease.lease_id, flush=True)
                    await asyncio.Event().wait()

        asyncio.run(hold())


if __name__ == "__main__":
    main()
