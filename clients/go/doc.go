// Package leasehold is the Go client of Leasehold, a distributed lock service: take a lock
// (or semaphore permits) for a critical section, keep it alive while the work runs, stop the
// work the moment the lock is lost, pass the fencing token on, release.
//
//	c := leasehold.New("http://127.0.0.1:8080", leasehold.WithAPIKey(key))
//	lease, err := c.Lock(ctx, "nightly-report", leasehold.LockOptions{TTL: 30 * time.Second, Wait: 30 * time.Second})
//	if err != nil {
//		return err // *leasehold.Problem with Code "lock_held" when still held after the wait
//	}
//	defer lease.Release(ctx)
//	return writeReport(lease.Context(), lease.FencingToken())
//
// While a lease is held, the client renews it every TTL/3 and keeps the server's watch stream
// for it open: Lease.Context is cancelled as soon as the server says the lease ended (an
// operator force-released it, it expired), or when heartbeats fail for so long that the
// lease may have run out. Lease.Err then says why (*LostError). Before a loss, Lease.Signals
// hands on what the watch tells (the lease expiring, Redis unreachable, others waiting, an
// operator's revocation); a revoked lease (Client.Revoke) is given up before its deadline
// unless released first.
//
// Calls that may be retried safely (acquires and releases carry an Idempotency-Key, heartbeats
// and ticket polls cannot act twice, reads) are retried on 503 and dropped connections.
// Errors of the server are *Problem values carrying its code (errors.As works with a
// *Problem or a Problem target). Standard library only; Go 1.19 or newer.
package leasehold
