package leasehold

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"
)

// Leader election: Campaign waits in line until this client leads an election, and returns
// its *Term, kept alive and watched as a *Lease is (it wraps one: the term's place is the
// election's candidate); Observe follows who leads; Leader reads it. See clients/PROTOCOL.md,
// "Elections".

// CampaignOption configures Campaign.
type CampaignOption func(*campaignConfig)

type campaignConfig struct {
	value     string
	ttl       time.Duration
	wait      time.Duration
	forever   bool
	holder    string
	lockDelay time.Duration
	onInLine  func(InLine)
}

// CampaignValue is what the candidate publishes while it leads (its address, ...): text of
// at most 4096 bytes, shown to every observer.
func CampaignValue(v string) CampaignOption { return func(c *campaignConfig) { c.value = v } }

// CampaignTTL is the term's TTL (heartbeat every TTL/3); zero: the server's default.
func CampaignTTL(d time.Duration) CampaignOption { return func(c *campaignConfig) { c.ttl = d } }

// CampaignWait bounds how long Campaign waits in line (then a *Problem with Code
// CodeLockHeld, and the line is left); without it, Campaign waits until it leads or ctx ends.
func CampaignWait(d time.Duration) CampaignOption {
	return func(c *campaignConfig) { c.wait, c.forever = d, false }
}

// CampaignHolder labels the candidate for people; default: the client's WithHolder.
func CampaignHolder(h string) CampaignOption { return func(c *campaignConfig) { c.holder = h } }

// CampaignLockDelay: should the term end other than by a resignation (its TTL ran out, an
// admin ended it), nobody leads for this long.
func CampaignLockDelay(d time.Duration) CampaignOption {
	return func(c *campaignConfig) { c.lockDelay = d }
}

type campaignBody struct {
	Value       string `json:"value"`
	TTLms       int64  `json:"ttl_ms,omitempty"`
	Holder      string `json:"holder,omitempty"`
	LockDelayMs int64  `json:"lock_delay_ms,omitempty"`
}

// candidateJSON is a candidate's standing: a term once it leads, a position while in line.
type candidateJSON struct {
	CandidateID string `json:"candidate_id"`
	Token       string `json:"token"`
	Term        int64  `json:"term"`
	Value       string `json:"value"`
	TTLms       int64  `json:"ttl_ms"`
	Position    int    `json:"position"`
	// In line: who leads now (nil when nobody does), and the server's estimate of the wait
	// (nil until it has one: zero is an estimate).
	Leader          *LeaderInfo `json:"leader"`
	EstimatedWaitMs *int64      `json:"estimated_wait_ms"`
}

// Term is this client's term as an election's leader: renewed every TTL/3 and watched, as a
// *Lease is, until Resign. Context ends the moment the term is lost (an admin ended it, its
// TTL ran out); Err then says why. A lost term is never campaigned for again by the client.
type Term struct {
	lease  *Lease
	number int64
	mu     sync.Mutex
	value  string
}

// Campaign stands as a candidate in election name and waits in line (first come, first
// served; its place is kept by polling) until it leads, then returns the term. Without
// CampaignWait it waits until ctx ends; a campaign cut short (ctx, the wait) leaves the line.
// One Idempotency-Key per call, sent on each retry. The term's Context derives from ctx.
func (c *Client) Campaign(ctx context.Context, name string, opts ...CampaignOption) (*Term, error) {
	cfg := campaignConfig{holder: c.holder, forever: true}
	for _, o := range opts {
		o(&cfg)
	}
	body := &campaignBody{Value: cfg.value, TTLms: ms(cfg.ttl), Holder: cfg.holder, LockDelayMs: ms(cfg.lockDelay)}
	p := electionPlace(name)
	deadline := time.Now().Add(cfg.wait)
	if cfg.forever {
		deadline = time.Now().Add(100 * 365 * 24 * time.Hour)
	}
	key := newKey()
	for {
		left := time.Until(deadline)
		if left < 0 {
			left = 0
		}
		q := url.Values{"wait_ms": {strconv.FormatInt(ms(left), 10)}}
		resp, err := c.do(ctx, &request{method: http.MethodPost, path: p.collection, query: q, body: body,
			idemKey: key, wait: left, retry: true})
		if err != nil {
			var pr *Problem
			waited := errors.As(err, &pr) && (pr.Code == CodeLockHeld || pr.Code == CodeLockDelay)
			if waited && time.Until(deadline) > 10*time.Millisecond {
				continue // a lock-delay (or the server's cut wait): wait on
			}
			return nil, err
		}
		var cand candidateJSON
		if err := decode(resp, &cand); err != nil {
			return nil, err
		}
		if cand.Token == "" || cand.CandidateID == "" {
			return nil, errNoToken
		}
		if resp.status == http.StatusAccepted {
			return c.waitInLine(ctx, p, &cand, deadline, &cfg)
		}
		return c.startTerm(ctx, p, &cand, cand.Token, resp.sent, cfg.value)
	}
}

// waitInLine long-polls the candidate until it leads; the wait running out (or ctx ending)
// leaves the line. Its place lost (410) is the campaign's error, never a new campaign. Each
// answer in line is told to cfg.onInLine.
func (c *Client) waitInLine(ctx context.Context, p place, cand *candidateJSON, deadline time.Time, cfg *campaignConfig) (*Term, error) {
	path := p.leasePath(cand.CandidateID)
	last := *cand
	for {
		tell(ctx, c, cfg.onInLine, last.inLine(), path, cand.Token)
		left := time.Until(deadline)
		if left <= 0 {
			c.leaveQueue(ctx, path, cand.Token)
			return nil, &Problem{Status: http.StatusConflict, Code: CodeLockHeld, Title: "Another candidate leads",
				Detail: fmt.Sprintf("still in line (position %d) when the wait ran out; left the line", last.Position)}
		}
		q := url.Values{"wait_ms": {strconv.FormatInt(ms(left), 10)}}
		resp, err := c.do(ctx, &request{method: http.MethodGet, path: path, query: q, bearer: cand.Token, wait: left, retry: true})
		if err != nil {
			if ctx.Err() != nil {
				c.leaveQueue(ctx, path, cand.Token) // resigns too, should its turn have come
			}
			return nil, err
		}
		var now candidateJSON
		if err := decode(resp, &now); err != nil {
			return nil, err
		}
		if resp.status == http.StatusAccepted {
			if now.Position > 0 {
				last = now
			}
			continue
		}
		now.CandidateID = cand.CandidateID
		return c.startTerm(ctx, p, &now, cand.Token, resp.sent, cfg.value)
	}
}

func (c *Client) startTerm(ctx context.Context, p place, cand *candidateJSON, token string, sent time.Time, value string) (*Term, error) {
	g := &grantJSON{LeaseID: cand.CandidateID, Token: token, Kind: "election", Lock: p.name,
		FencingToken: cand.Term, TTLms: cand.TTLms}
	l, err := c.startLease(ctx, p, g, token, sent, 0)
	if err != nil {
		return nil, err
	}
	if cand.Value != "" {
		value = cand.Value
	}
	return &Term{lease: l, number: cand.Term, value: value}, nil
}

// Number is the term: a fencing token that only grows per election. Pass it with every
// write the leader makes; a resource that keeps the largest it has seen refuses older ones.
func (t *Term) Number() int64 { return t.number }

// Value is what the leader publishes now (Proclaim changes it).
func (t *Term) Value() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.value
}

// Name is the election's name.
func (t *Term) Name() string { return t.lease.place.name }

// CandidateID is the candidate's id (the term's lease id).
func (t *Term) CandidateID() string { return t.lease.id }

// Lease is the lease the term is kept as (its TTL, replicas acknowledged, ...).
func (t *Term) Lease() *Lease { return t.lease }

// Context is cancelled when the term is lost (then Err says why), when it is resigned, or
// when the ctx given to Campaign ends. Derive the leader's work from it.
func (t *Term) Context() context.Context { return t.lease.Context() }

// Lost is closed when the term is lost (not when it is resigned).
func (t *Term) Lost() <-chan struct{} { return t.lease.Lost() }

// Err is nil while the term holds (and after a resignation of a term that held until then);
// once it is lost, a *LostError saying why.
func (t *Term) Err() error { return t.lease.Err() }

// Signals hands on every signal the term's watch tells (Lease.Signals): contended counts the
// candidates in line.
func (t *Term) Signals() <-chan Signal { return t.lease.Signals() }

// Revocation is an operator's request that the leader resign (nil until one came): the term
// is given up as lost (ReasonRevoked) a margin before its Deadline, unless resigned first.
func (t *Term) Revocation() *Revocation { return t.lease.Revocation() }

// RevocationRequested is closed when an operator asks the leader to resign.
func (t *Term) RevocationRequested() <-chan struct{} { return t.lease.RevocationRequested() }

// Proclaim publishes a new value in the same term: observers get it as a "leader" event.
// Once the term has ended: the *LostError (and the term is lost).
func (t *Term) Proclaim(ctx context.Context, value string) error {
	if err := t.Err(); err != nil {
		return err
	}
	_, err := t.lease.c.do(ctx, &request{method: http.MethodPut, path: t.lease.leasePath() + "/value",
		body: map[string]string{"value": value}, bearer: t.lease.token, retry: true})
	if lost := lostFrom(err); lost != nil {
		t.lease.markLost(lost)
		return t.Err()
	}
	if err != nil {
		return err
	}
	t.mu.Lock()
	t.value = value
	t.mu.Unlock()
	return nil
}

// Resign ends the term (the next candidate leads at once) and stops keeping it; defer it.
// Sent even when ctx is done. It returns the *LostError when the term had been lost before,
// else an error only when the resignation could not be sent (the term then ends with its
// TTL). Calling it again does nothing.
func (t *Term) Resign(ctx context.Context) error { return t.lease.Release(ctx) }

// TermCheck is the answer of CheckTerm.
type TermCheck struct {
	Election string `json:"election"`
	Term     int64  `json:"term"`
	// Current: term is the leader's now (when the server read it).
	Current bool `json:"current"`
	// LastTerm is the last term handed out.
	LastTerm int64 `json:"last_term"`
}

// CheckTerm asks whether term is the current leader's of election name.
func (c *Client) CheckTerm(ctx context.Context, name string, term int64) (*TermCheck, error) {
	resp, err := c.do(ctx, &request{method: http.MethodPost, path: electionPath(name) + "/fence/check",
		body: map[string]int64{"term": term}, retry: true})
	if err != nil {
		return nil, err
	}
	var r TermCheck
	if err := decode(resp, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// EndTerm ends the current term of election name (an admin's action: the admin token or an
// admin key): its leader learns it at once, and the next candidate leads with a higher term.
// Not retried, as ForceRelease.
func (c *Client) EndTerm(ctx context.Context, name, reason string) (*ForceReleaseResult, error) {
	var q url.Values
	if reason != "" {
		q = url.Values{"reason": {reason}}
	}
	resp, err := c.do(ctx, &request{method: http.MethodDelete, path: "/v1/admin/elections/" + url.PathEscape(name), query: q})
	if err != nil {
		return nil, err
	}
	var r ForceReleaseResult
	if err := decode(resp, &r); err != nil {
		return nil, err
	}
	return &r, nil
}
