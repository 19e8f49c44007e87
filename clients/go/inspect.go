package leasehold

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
)

// The reads: fence checks, a lock's or semaphore's holders, one lease's state (also for a
// while after it ended), a multilease, and the live names. All are retried on 503 and
// dropped connections (they cannot act).

// FenceCheck is the answer of CheckFence.
type FenceCheck struct {
	Lock         string `json:"lock"`
	FencingToken int64  `json:"fencing_token"`
	// Current: a lease holding the lock right now carries this token (true when the server
	// read it; it may be false a moment later).
	Current bool `json:"current"`
	// FencingCounter is the highest token handed out so far on the lock.
	FencingCounter int64 `json:"fencing_counter"`
}

// CheckFence asks whether fencingToken is the token of a lease holding lock name now: what
// a resource that cannot store the largest token it has seen asks before applying a write.
func (c *Client) CheckFence(ctx context.Context, name string, fencingToken int64) (*FenceCheck, error) {
	resp, err := c.do(ctx, &request{method: http.MethodPost, path: lockPath(name) + "/fence/check",
		body: map[string]int64{"fencing_token": fencingToken}, retry: true})
	if err != nil {
		return nil, err
	}
	var f FenceCheck
	if err := decode(resp, &f); err != nil {
		return nil, err
	}
	return &f, nil
}

// LockInfo is what InspectLock answers (a part of GET /v1/locks/{name}).
type LockInfo struct {
	Lock string `json:"lock"`
	Held bool   `json:"held"`
	// Kind is what the name is used as: reentrant, exclusive, fair, rw, redlock, semaphore,
	// or foreign (a Redisson client's lock); empty when free.
	Kind           string       `json:"kind"`
	Mode           string       `json:"mode"`
	Holders        []HolderInfo `json:"holders"`
	QueueLength    int          `json:"queue_length"`
	FencingCounter int64        `json:"fencing_counter"`
	RemainingMs    int64        `json:"remaining_ms"`
	WaitingCount   int          `json:"waiting_count"`
	// LockDelayMs is the lock-delay its holder asked for, or the one the name is in now.
	LockDelayMs int64 `json:"lock_delay_ms"`
	// DelayedUntil (RFC 3339): nobody holds it, but it is in its lock-delay until then.
	DelayedUntil string `json:"delayed_until"`
}

// HolderInfo is one holder of a lock (or of a semaphore's permits).
type HolderInfo struct {
	LeaseID      string                 `json:"lease_id"` // empty for a Redisson client
	Holder       string                 `json:"holder"`
	Metadata     map[string]interface{} `json:"metadata"`
	Kind         string                 `json:"kind"`
	ReentryCount int                    `json:"reentry_count"`
	ReadCount    int                    `json:"read_count"`
	WriteCount   int                    `json:"write_count"`
	Permits      int                    `json:"permits"`
	FencingToken int64                  `json:"fencing_token"`
	// Multilease: the multilease this holder's lease is a member of (nil when it is none).
	Multilease *Membership `json:"multilease"`
}

// Membership says which multilease a lease is a member of, and its locks: those the caller's
// key may see, and how many others (HiddenLocks: counted, not named).
type Membership struct {
	LeaseID     string   `json:"lease_id"`
	Locks       []string `json:"locks"`
	HiddenLocks int      `json:"hidden_locks"`
}

// InspectLock says who holds lock name and who waits (404 lock_not_found when it is free and
// was never taken).
func (c *Client) InspectLock(ctx context.Context, name string) (*LockInfo, error) {
	return get[LockInfo](ctx, c, lockPath(name), nil)
}

// SemaphoreInfo is what InspectSemaphore answers.
type SemaphoreInfo struct {
	Semaphore      string       `json:"semaphore"`
	Limit          int          `json:"limit"`
	Used           int          `json:"used"`
	Available      int          `json:"available"`
	FencingCounter int64        `json:"fencing_counter"`
	Holders        []HolderInfo `json:"holders"`
	WaitingCount   int          `json:"waiting_count"`
}

// InspectSemaphore says how many permits of semaphore name are out, and to whom.
func (c *Client) InspectSemaphore(ctx context.Context, name string) (*SemaphoreInfo, error) {
	return get[SemaphoreInfo](ctx, c, semaphorePath(name), nil)
}

// LeaseInfo is one lease as anyone may see it (never its token): InspectLease,
// InspectSemaphoreLease.
type LeaseInfo struct {
	LeaseID string `json:"lease_id"`
	Lock    string `json:"lock"`
	// State is held, queued (a fair ticket), released, expired, force_released or left.
	State        string                 `json:"state"`
	Kind         string                 `json:"kind"`
	ReadCount    int                    `json:"read_count"`
	WriteCount   int                    `json:"write_count"`
	Position     int                    `json:"position"` // a fair ticket's place (1 = next)
	Permits      int                    `json:"permits"`
	Holder       string                 `json:"holder"`
	Metadata     map[string]interface{} `json:"metadata"`
	FencingToken int64                  `json:"fencing_token"`
	ReentryCount int                    `json:"reentry_count"`
	TTLms        int64                  `json:"ttl_ms"`
	RemainingMs  int64                  `json:"remaining_ms"`
	AcquiredAt   string                 `json:"acquired_at"`
	ExpiresAt    string                 `json:"expires_at"`
	EndedAt      string                 `json:"ended_at"`
	// Multilease: the multilease it is a member of (nil when it is none).
	Multilease *Membership `json:"multilease"`
}

// InspectLease says what became of lease leaseID on lock name: held, or how it ended (404
// lease_not_found once the server has forgotten it).
func (c *Client) InspectLease(ctx context.Context, name, leaseID string) (*LeaseInfo, error) {
	return get[LeaseInfo](ctx, c, lockPlace(name).leasePath(leaseID), nil)
}

// InspectSemaphoreLease is InspectLease for a lease of semaphore name's permits.
func (c *Client) InspectSemaphoreLease(ctx context.Context, name, leaseID string) (*LeaseInfo, error) {
	return get[LeaseInfo](ctx, c, semaphorePlace(name).leasePath(leaseID), nil)
}

// MultileaseInfo is a multilease as anyone may see it: InspectMultilease.
type MultileaseInfo struct {
	LeaseID string `json:"lease_id"`
	// State is held, released, expired or force_released (a member's end is the whole's).
	State   string `json:"state"`
	Members []struct {
		Lock    string `json:"lock"`
		Kind    string `json:"kind"`
		LeaseID string `json:"lease_id"`
	} `json:"members"`
	Holder   string                 `json:"holder"`
	Metadata map[string]interface{} `json:"metadata"`
	// LostMember is the lock whose end ended it, once it has.
	LostMember  string `json:"lost_member"`
	TTLms       int64  `json:"ttl_ms"`
	RemainingMs int64  `json:"remaining_ms"`
	AcquiredAt  string `json:"acquired_at"`
	ExpiresAt   string `json:"expires_at"`
	EndedAt     string `json:"ended_at"`
}

// InspectMultilease says what became of multilease leaseID (Lease.ID of a Multilease).
func (c *Client) InspectMultilease(ctx context.Context, leaseID string) (*MultileaseInfo, error) {
	return get[MultileaseInfo](ctx, c, "/v1/multileases/"+url.PathEscape(leaseID), nil)
}

// ListOptions page through ListLocks.
type ListOptions struct {
	// Prefix keeps the names that start with it.
	Prefix string
	// Cursor goes on from a page's NextCursor.
	Cursor string
	// Limit is about how many names a page holds (1 to 1000; zero: the server's 100).
	Limit int
}

// LockList is one page of the live locks and semaphores, sorted by name within the page.
type LockList struct {
	Locks []LockSummary `json:"locks"`
	// NextCursor goes in ListOptions.Cursor for the next page; empty after the last page.
	NextCursor string `json:"next_cursor"`
}

// LockSummary is one live lock (held, or waited for) or semaphore (permits out), in brief.
type LockSummary struct {
	Name string `json:"name"`
	// Kind: reentrant, exclusive, fair, rw, redlock, semaphore or foreign.
	Kind        string `json:"kind"`
	Holders     int    `json:"holders"`
	Holder      string `json:"holder"` // the first holder's label
	QueueLength int    `json:"queue_length"`
	Used        int    `json:"used"`  // semaphores: permits in use
	Limit       int    `json:"limit"` // semaphores: permits in all
	RemainingMs int64  `json:"remaining_ms"`
	HeldForMs   int64  `json:"held_for_ms"`
	Waiting     int    `json:"waiting"`
}

// ListLocks lists a page of the live locks and semaphores the caller may see.
func (c *Client) ListLocks(ctx context.Context, o ListOptions) (*LockList, error) {
	q := url.Values{}
	if o.Prefix != "" {
		q.Set("prefix", o.Prefix)
	}
	if o.Cursor != "" {
		q.Set("cursor", o.Cursor)
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	return get[LockList](ctx, c, "/v1/locks", q)
}

// get reads path as a T, retrying 503s and dropped connections.
func get[T any](ctx context.Context, c *Client, path string, q url.Values) (*T, error) {
	resp, err := c.do(ctx, &request{method: http.MethodGet, path: path, query: q, retry: true})
	if err != nil {
		return nil, err
	}
	var v T
	if err := decode(resp, &v); err != nil {
		return nil, err
	}
	return &v, nil
}
