package leasehold

import (
	"context"
	"time"
)

// What a held lease says of itself (lease.go keeps it).

// Name is the lock's (or semaphore's) name; a multilease's locks, joined by commas.
func (l *Lease) Name() string { return l.place.name }

// ID is the lease's id.
func (l *Lease) ID() string { return l.id }

// Token is the lease's bearer token, the proof of the lease: keep it as secret as an API key.
func (l *Lease) Token() string { return l.token }

// FencingToken grows with every new lease of the lock: pass it to the resource you protect,
// which refuses writes with a smaller token than the largest it has seen. A multilease has
// one per lock instead (Members); this is 0 for it.
func (l *Lease) FencingToken() int64 { return l.fence }

// Kind is the lease's kind: reentrant, exclusive, fair, read, write, redlock, semaphore or
// multilease.
func (l *Lease) Kind() string { return l.kind }

// Members are a multilease's locks, each with its own lease and fencing token, and its
// revocation once one was told (nil for a lease of one lock or semaphore).
func (l *Lease) Members() []Member {
	l.mu.Lock()
	defer l.mu.Unlock()
	members := append([]Member(nil), l.members...)
	for i, m := range members {
		if m.Revocation != nil {
			r := *m.Revocation
			members[i].Revocation = &r
		}
	}
	return members
}

// ReplicasAcked is how many Redis replicas acknowledged the last grant or heartbeat (0 when
// the server requires none: --min-replica-acks). For a multilease, its weakest member's.
func (l *Lease) ReplicasAcked() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.acked.ReplicasAcked
}

// NodesAcked is how many RedLock nodes granted or last extended a redlock lease (0 for other
// kinds).
func (l *Lease) NodesAcked() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.acked.NodesAcked
}

// Validity is how long a redlock lease could be relied on when its last grant or heartbeat
// was answered (its TTL less the time taken and the clock drift); 0 for other kinds.
func (l *Lease) Validity() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return time.Duration(l.acked.ValidityMs) * time.Millisecond
}

// Degraded says why the last grant or heartbeat stands on its Redis primary alone
// (DegradedNoReplica, DegradedNotReplicated; a multilease: its first such member's), so a
// failover could lose it; "" when it does not.
func (l *Lease) Degraded() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.acked.Degraded
}

// Permits is the number of permits a semaphore lease holds (0 for locks).
func (l *Lease) Permits() int { return l.permits }

// Holder is the lease's label.
func (l *Lease) Holder() string { return l.holder }

// TTL is the lease's time to live, renewed every TTL/3.
func (l *Lease) TTL() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ttl
}

// ReentryCount is how many levels the lease holds (Reenter adds one).
func (l *Lease) ReentryCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.count
}

// Context is cancelled when the lease is lost (then Err says why), when it is released, or
// when the ctx given to Lock ends. Derive the work's context from it.
func (l *Lease) Context() context.Context { return l.ctx }

// Lost is closed when the lease is lost (not when it is released).
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// Err is nil while the lease holds (and after a release of a lease that held until then);
// once it is lost, a *LostError saying why.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lostErr == nil {
		return nil
	}
	return l.lostErr
}
