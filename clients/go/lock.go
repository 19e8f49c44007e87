package leasehold

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Kind is the kind of lock an acquire asks for.
type Kind string

// The lock kinds (see the server README's "Lock kinds").
const (
	KindReentrant Kind = "reentrant" // the default: the lease may re-enter (Reenter)
	KindExclusive Kind = "exclusive" // not reentrant: a second entry is 409 not_reentrant
	KindFair      Kind = "fair"      // FIFO among waiters; reentrant
	KindRead      Kind = "read"      // shared with other readers
	KindWrite     Kind = "write"     // excludes readers and writers
	KindRedlock   Kind = "redlock"   // a majority of the server's --redlock-nodes; reentrant
)

// Policy orders readers and writers on a read/write lock.
type Policy string

// Read/write policies.
const (
	PolicyReadersFirst Policy = "readers_first" // the default (Redisson's)
	PolicyFIFO         Policy = "fifo"          // readers wait behind a waiting writer (Curator's)
)

// LockOptions are the options of Client.Lock. The zero value takes a reentrant lock with the
// server's default TTL (30 s), without waiting.
type LockOptions struct {
	// TTL of the lease: the client renews it every TTL/3 while the lease is held. Zero: the
	// server's default.
	TTL time.Duration
	// Wait is how long to wait for the lock while others hold it; zero: do not wait. Waits
	// longer than the server's --max-wait-ms are continued by the client.
	Wait time.Duration
	// Kind: KindReentrant (default), KindExclusive, KindFair, KindRead, KindWrite or
	// KindRedlock (a server with --redlock-nodes).
	Kind Kind
	// Policy of a read/write lock: PolicyReadersFirst (default) or PolicyFIFO.
	Policy Policy
	// Holder labels the lease for people (operators, refused acquirers); default: the
	// client's WithHolder.
	Holder string
	// Metadata is a small JSON object kept with the lease (at most 4 KiB).
	Metadata map[string]interface{}
	// LockDelay: should the lease end other than by a release (it expired, an operator
	// removed it), the lock refuses new leases for this long (409 lock_delay), so that a
	// holder that was paused finds nobody else writing yet. Zero: none. At most the server's
	// --max-lock-delay-ms (60 s by default; beyond: 422 invalid_lock_delay).
	LockDelay time.Duration
	// OnQueued, if set, is called while a fair lock waits in line, with each answer in line
	// (the first at once, then one per poll: at least every --max-wait-ms), from the goroutine
	// that called Lock: keep it quick. Should it panic, the queue is left first, and the panic
	// goes on up.
	OnQueued func(Queued)
	// ExpiringSlack sets when this lease's watch tells SignalExpiring: once less than it is
	// left with no heartbeat since. Zero: the client's (WithExpiringSlack), else a third of the
	// TTL; the server takes at most half of it. Negative: Lock fails.
	ExpiringSlack time.Duration
}

// Queued is where a fair lock's waiter stands, as an answer in line tells it
// (LockOptions.OnQueued).
type Queued struct {
	// Position in line: 1 is next.
	Position int
	// EstimatedWait is the server's estimate of the wait until this waiter's turn, from the
	// name's recent hold times; zero when it has none (fewer than three past holds).
	EstimatedWait time.Duration
	// HeldBy is the holding lease's label, HeldFor how long it has held the lock.
	HeldBy  string
	HeldFor time.Duration
}

// waiting is what an acquire asks of the client rather than of the server: how long to wait,
// whom to tell of each answer in line, and the new lease's watch slack (zero: the client's).
type waiting struct {
	wait     time.Duration
	onQueued func(Queued)
	slack    time.Duration
}

// SemaphoreOptions are the options of Client.Semaphore.
type SemaphoreOptions struct {
	// Limit is the semaphore's number of permits; every party must name the same (else 409
	// limit_mismatch). Required.
	Limit int
	// Permits this lease takes; zero means 1.
	Permits int
	TTL     time.Duration
	Wait    time.Duration
	Holder  string
	// Metadata is a small JSON object kept with the lease (at most 4 KiB).
	Metadata map[string]interface{}
}

type acquireBody struct {
	TTLms    int64                  `json:"ttl_ms,omitempty"`
	Holder   string                 `json:"holder,omitempty"`
	Metadata map[string]interface{} `json:"metadata,omitempty"`
	Kind     Kind                   `json:"kind,omitempty"`
	Policy   Policy                 `json:"policy,omitempty"`
	// LockDelayMs is a pointer so that a reentry sends none (it keeps the lease's own).
	LockDelayMs *int64 `json:"lock_delay_ms,omitempty"`
}

type permitBody struct {
	Limit    int                    `json:"limit"`
	Permits  int                    `json:"permits,omitempty"`
	TTLms    int64                  `json:"ttl_ms,omitempty"`
	Holder   string                 `json:"holder,omitempty"`
	Metadata map[string]interface{} `json:"metadata,omitempty"`
}

type grantJSON struct {
	LeaseID      string   `json:"lease_id"`
	Token        string   `json:"token"`
	Lock         string   `json:"lock"`
	Kind         string   `json:"kind"`
	Holder       string   `json:"holder"`
	FencingToken int64    `json:"fencing_token"`
	ReentryCount int      `json:"reentry_count"`
	Permits      int      `json:"permits"`
	TTLms        int64    `json:"ttl_ms"`
	Members      []Member `json:"members"` // a multilease's
	acked
}

// acked is what a grant or a heartbeat says of the copies behind it, by kind of store.
type acked struct {
	// ReplicasAcked: Redis replicas that acknowledged it (with --min-replica-acks).
	ReplicasAcked int `json:"replicas_acked"`
	// NodesAcked: RedLock nodes that granted or extended it.
	NodesAcked int `json:"nodes_acked"`
	// ValidityMs: RedLock: how long it may be relied on from the answer on.
	ValidityMs int64 `json:"validity_ms"`
	// Degraded: set when it stands on its Redis primary alone (DegradedNoReplica,
	// DegradedNotReplicated).
	Degraded string `json:"degraded"`
}

// Why a grant or heartbeat stands on its Redis primary alone (Lease.Degraded): a failover
// could lose it.
const (
	// DegradedNoReplica: the lock's shard has no replica a failover could promote
	// (--min-replica-acks auto); no failover can lose it, a crash of the primary without
	// persistence can.
	DegradedNoReplica = "no_replica"
	// DegradedNotReplicated: a heartbeat too few replicas acknowledged in time; extended on the
	// primary, where the lease stands.
	DegradedNotReplicated = "not_replicated"
)

type ticketJSON struct {
	TicketID        string `json:"ticket_id"`
	Token           string `json:"token"`
	Position        int    `json:"position"`
	PollTimeoutMs   int64  `json:"poll_timeout_ms"`
	HeldBy          string `json:"held_by"`
	HeldForMs       int64  `json:"held_for_ms"`
	EstimatedWaitMs int64  `json:"estimated_wait_ms"`
}

// queued is where the ticket stands, for LockOptions.OnQueued.
func (t *ticketJSON) queued() Queued {
	return Queued{Position: t.Position, EstimatedWait: duration(t.EstimatedWaitMs), HeldBy: t.HeldBy,
		HeldFor: duration(t.HeldForMs)}
}

// Lock takes the lock name and keeps it until Release: it waits up to o.Wait while others
// hold it (for a fair lock, in the queue), then renews the lease every TTL/3 and watches it.
//
// Not acquired within the wait: a *Problem with Code CodeLockHeld (Holder, RetryAfter say
// who and until when). The returned lease's Context is derived from ctx: it is cancelled when
// the lease is lost, released, or when ctx ends; keep ctx for the work, not a short timeout
// for the acquire (o.Wait bounds that).
func (c *Client) Lock(ctx context.Context, name string, o LockOptions) (*Lease, error) {
	holder := o.Holder
	if holder == "" {
		holder = c.holder
	}
	body := &acquireBody{TTLms: ms(o.TTL), Holder: holder, Metadata: o.Metadata, Kind: o.Kind, Policy: o.Policy}
	if o.LockDelay > 0 {
		delay := ms(o.LockDelay)
		body.LockDelayMs = &delay
	}
	if o.ExpiringSlack < 0 {
		return nil, errNegativeSlack
	}
	return c.acquire(ctx, lockPlace(name), body, waiting{wait: o.Wait, onQueued: o.OnQueued, slack: o.ExpiringSlack})
}

// Semaphore takes o.Permits (default 1) of the o.Limit permits of semaphore name, waiting up
// to o.Wait for them; not enough within the wait: a *Problem with Code CodeNoPermits. The
// lease is kept and watched as Lock's are.
func (c *Client) Semaphore(ctx context.Context, name string, o SemaphoreOptions) (*Lease, error) {
	holder := o.Holder
	if holder == "" {
		holder = c.holder
	}
	body := &permitBody{Limit: o.Limit, Permits: o.Permits, TTLms: ms(o.TTL), Holder: holder, Metadata: o.Metadata}
	return c.acquire(ctx, semaphorePlace(name), body, waiting{wait: o.Wait})
}

// WithLock runs fn under the lock: it takes it (Lock), runs fn with the lease's context,
// and releases it however fn ends (an error, a panic, a cancelled ctx). It returns the
// *LostError when the lease was lost meanwhile (fn's context was cancelled then), else fn's
// error, else Release's.
func (c *Client) WithLock(ctx context.Context, name string, o LockOptions, fn func(ctx context.Context, lease *Lease) error) (err error) {
	lease, err := c.Lock(ctx, name, o)
	if err != nil {
		return err
	}
	return runHolding(ctx, lease, fn)
}

// runHolding runs fn with the lease's context and releases the lease however fn ends.
func runHolding(ctx context.Context, lease *Lease, fn func(ctx context.Context, lease *Lease) error) (err error) {
	defer func() {
		r := recover()
		rerr := lease.Release(ctx)
		if r != nil {
			panic(r)
		}
		if lost := lease.Err(); lost != nil {
			err = lost
		} else if err == nil {
			err = rerr
		}
	}()
	return fn(lease.Context(), lease)
}

func (c *Client) acquire(ctx context.Context, p place, body interface{}, w waiting) (*Lease, error) {
	wait := w.wait
	if wait < 0 {
		wait = 0
	}
	key := newKey() // one per call: every retry (503, dropped connection) carries it
	deadline := time.Now().Add(wait)
	// A fair acquire takes its place in the queue at once (wait_ms=0: the lease, or a 202
	// ticket) and waits by polling the ticket: the server answers a fair acquire that carries an
	// Idempotency-Key and waits server-side with 422 idempotency_key_reused when it attempts
	// again (woken, or at the end of its wait) instead of with the lease or the ticket (reported
	// with this client). Ticket polls need no key: they cannot act twice.
	fair := false
	if b, ok := body.(*acquireBody); ok && b.Kind == KindFair {
		fair = true
	}
	for {
		left := time.Until(deadline)
		if left < 0 || fair {
			left = 0
		}
		q := url.Values{"wait_ms": {strconv.FormatInt(ms(left), 10)}}
		resp, err := c.do(ctx, &request{method: http.MethodPost, path: p.collection, query: q, body: body,
			idemKey: key, wait: left, retry: true})
		if err != nil {
			var pr *Problem
			waited := errors.As(err, &pr) && (pr.Code == CodeLockHeld || pr.Code == CodeNoPermits || pr.Code == CodeLockDelay)
			if waited && time.Until(deadline) > 10*time.Millisecond {
				continue // the server cut the wait to its --max-wait-ms: wait on (a lock-delay too)
			}
			return nil, err
		}
		switch resp.status {
		case http.StatusCreated:
			var g grantJSON
			if err := decode(resp, &g); err != nil {
				return nil, err
			}
			return c.startLease(ctx, p, &g, g.Token, resp.sent, w.slack)
		case http.StatusAccepted:
			var t ticketJSON
			if err := decode(resp, &t); err != nil {
				return nil, err
			}
			return c.waitTicket(ctx, p, &t, deadline, w)
		default:
			return nil, fmt.Errorf("leasehold: unexpected %d answer to an acquire", resp.status)
		}
	}
}

// waitTicket long-polls a fair lock's ticket until it turns into the lease or the wait ends
// (then it leaves the queue and answers lock_held, as a non-fair lock would, saying who held
// the lock at the last answer in line). Each answer in line is told to w.onQueued.
func (c *Client) waitTicket(ctx context.Context, p place, t *ticketJSON, deadline time.Time, w waiting) (*Lease, error) {
	if t.Token == "" {
		return nil, errNoToken
	}
	path := lockPath(p.name) + "/tickets/" + url.PathEscape(t.TicketID)
	last := t.queued()
	for {
		tell(ctx, c, w.onQueued, last, path, t.Token)
		left := time.Until(deadline)
		if left <= 0 {
			c.leaveQueue(ctx, path, t.Token)
			return nil, &Problem{Status: http.StatusConflict, Code: CodeLockHeld, Title: "The lock is held by another lease",
				Detail:        fmt.Sprintf("still queued (position %d) when the wait ran out; left the queue", last.Position),
				Holder:        last.HeldBy,
				HeldFor:       last.HeldFor,
				EstimatedWait: last.EstimatedWait}
		}
		q := url.Values{"wait_ms": {strconv.FormatInt(ms(left), 10)}}
		// Polling again is safe: a ticket answers its grant again, never a second lease.
		resp, err := c.do(ctx, &request{method: http.MethodPost, path: path, query: q, bearer: t.Token, wait: left, retry: true})
		if err != nil {
			if ctx.Err() != nil {
				c.leaveQueue(ctx, path, t.Token)
			}
			return nil, err
		}
		switch resp.status {
		case http.StatusCreated, http.StatusOK:
			var g grantJSON
			if err := decode(resp, &g); err != nil {
				return nil, err
			}
			return c.startLease(ctx, p, &g, t.Token, resp.sent, w.slack)
		case http.StatusAccepted:
			var nt ticketJSON
			if err := decode(resp, &nt); err == nil && nt.Position > 0 {
				last = nt.queued()
			}
		default:
			return nil, fmt.Errorf("leasehold: unexpected %d answer to a ticket poll", resp.status)
		}
	}
}

func (c *Client) leaveQueue(ctx context.Context, path, token string) {
	lctx, cancel := detached(ctx, 5*time.Second)
	defer cancel()
	_, _ = c.do(lctx, &request{method: http.MethodDelete, path: path, bearer: token, retry: true, window: 5 * time.Second})
}

// ForceReleaseResult is the answer of ForceRelease.
type ForceReleaseResult struct {
	Lock string `json:"lock"`
	// Released is false when nobody held it and it was in no lock-delay.
	Released bool         `json:"released"`
	Removed  []HolderInfo `json:"removed"`
	// DelayLifted: nobody held it, but it was in its lock-delay; the delay was lifted and the
	// name is free.
	DelayLifted bool `json:"delay_lifted"`
}

// ForceRelease removes every holder of lock name (an operator's action: the client needs
// the admin token or an admin key, WithAPIKey), or, when nobody holds it, lifts its
// lock-delay. Their holders learn it at once (their leases' contexts are cancelled). Not
// retried: a 503 may or may not have acted, and a retry could remove the next holder.
func (c *Client) ForceRelease(ctx context.Context, name, reason string) (*ForceReleaseResult, error) {
	var q url.Values
	if reason != "" {
		q = url.Values{"reason": {reason}}
	}
	resp, err := c.do(ctx, &request{method: http.MethodDelete, path: "/v1/admin/locks/" + url.PathEscape(name), query: q})
	if err != nil {
		return nil, err
	}
	var r ForceReleaseResult
	if err := decode(resp, &r); err != nil {
		return nil, err
	}
	return &r, nil
}
