package leasehold

import (
	"context"
	"errors"
	"time"
)

// MultiLock is one lock of a multilease: its name and kind (KindReentrant when empty;
// KindExclusive, KindFair, KindRead and KindWrite too, not KindRedlock).
type MultiLock struct {
	Name string `json:"name"`
	Kind Kind   `json:"kind,omitempty"`
}

// MultiOptions are the options of Client.Multilease: as LockOptions, for every lock.
type MultiOptions struct {
	// TTL of the multilease (of every member): renewed every TTL/3. Zero: the server's default.
	TTL time.Duration
	// Wait is how long to wait, in all, until every lock is free at once; zero: do not wait.
	Wait time.Duration
	// Holder labels every member for people; default: the client's WithHolder.
	Holder string
	// Metadata is a small JSON object kept with the multilease and every member.
	Metadata map[string]interface{}
	// LockDelay applies to every member (see LockOptions.LockDelay).
	LockDelay time.Duration
}

// Member is one lock of a held multilease: its own lease on the lock and its fencing token,
// which goes with every write to the resource that lock protects.
type Member struct {
	Lock         string `json:"lock"`
	Kind         string `json:"kind"`
	LeaseID      string `json:"lease_id"`
	FencingToken int64  `json:"fencing_token"`
	// ReplicasAcked: Redis replicas that acknowledged this member's grant (0 when none are
	// required).
	ReplicasAcked int `json:"replicas_acked"`
	// Degraded: set when this member's grant or renewal stands on its Redis primary alone.
	Degraded string `json:"degraded,omitempty"`
	// Revocation: an operator's request that this member's lock be let go, once told (by the
	// watch or a heartbeat's answer; nil until then). The multilease ends by the earliest
	// deadline of its members' (Lease.Revocation).
	Revocation *Revocation `json:"revocation,omitempty"`
}

// withMembers is what a grant or heartbeat says of the copies behind the whole lease: a
// multilease's is its weakest member's (the fewest replicas, the first degraded member).
func (a acked) withMembers(members []Member) acked {
	for i, m := range members {
		if i == 0 || m.ReplicasAcked < a.ReplicasAcked {
			a.ReplicasAcked = m.ReplicasAcked
		}
		if a.Degraded == "" {
			a.Degraded = m.Degraded
		}
	}
	return a
}

type multiBody struct {
	Locks       []MultiLock            `json:"locks"`
	TTLms       int64                  `json:"ttl_ms,omitempty"`
	Holder      string                 `json:"holder,omitempty"`
	Metadata    map[string]interface{} `json:"metadata,omitempty"`
	LockDelayMs int64                  `json:"lock_delay_ms,omitempty"`
}

// Multilease takes every lock of locks as one lease, all or nothing (a Redisson
// RedissonMultiLock, without its deadlocks: the server never waits while holding some of
// them). The lease is kept, watched and released as Lock's is: one heartbeat renews every
// lock, and the loss of any member is the loss of the whole (Context is cancelled, Err says
// which member in LostError.Member). Each lock has its own fencing token: Members.
//
// Not every lock free within the wait: a *Problem with Code CodeLockHeld whose Members name
// each lock refused (with its own code: lock_held, lock_delay, ...); nothing is held then.
func (c *Client) Multilease(ctx context.Context, locks []MultiLock, o MultiOptions) (*Lease, error) {
	if len(locks) == 0 {
		return nil, errors.New("leasehold: a multilease needs at least one lock")
	}
	holder := o.Holder
	if holder == "" {
		holder = c.holder
	}
	body := &multiBody{Locks: locks, TTLms: ms(o.TTL), Holder: holder, Metadata: o.Metadata, LockDelayMs: ms(o.LockDelay)}
	return c.acquire(ctx, multileasePlace(locks), body, waiting{wait: o.Wait})
}

// WithMultilease is WithLock for a multilease: it takes every lock, runs fn with the lease's
// context (cancelled when any member is lost), and releases them all however fn ends.
func (c *Client) WithMultilease(ctx context.Context, locks []MultiLock, o MultiOptions, fn func(ctx context.Context, lease *Lease) error) error {
	lease, err := c.Multilease(ctx, locks, o)
	if err != nil {
		return err
	}
	return runHolding(ctx, lease, fn)
}
