package leasehold

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"
)

// Lease is a held lock, semaphore permits, or several locks held as one (a multilease).
// While it is held, the client renews it every TTL/3 and keeps its watch stream open;
// Context is cancelled the moment it is lost. Call Release when the work is done (defer it):
// that is the only way its renewals stop.
type Lease struct {
	c       *Client
	place   place
	id      string
	token   string
	kind    string
	fence   int64
	permits int
	holder  string
	members []Member
	slack   time.Duration // the watch's expiring_slack_ms (0: the server's default)

	ctx    context.Context // the work's: cancelled on loss, on release, or when Lock's ctx ends
	cancel context.CancelFunc
	// inner is the renewals' and the watch's: cancelled when the lease is over (released or lost).
	inner      context.Context
	stopInner  context.CancelFunc
	lost       chan struct{}
	keeperDone chan struct{}
	watchDone  chan struct{}

	relMu sync.Mutex // one Release, ReleaseLevel or Reenter at a time

	mu        sync.Mutex
	ttl       time.Duration
	count     int
	renewedAt time.Time // when the last grant, reentry or heartbeat that succeeded was sent
	acked     acked     // what the last grant or heartbeat said of the copies behind it
	lostErr   *LostError
	releasing bool // a release of ours is under way: its "released" is no loss
	over      bool
	// revocation is the operator's request to let go (of a multilease's members', the one
	// with the earliest deadline; revokedMember its lock); revoked is closed at the first, and
	// revokeTimer gives the lease up at the kept deadline less the margin. told: each
	// revocation handed on (lock and deadline), once.
	revocation    *Revocation
	revokedMember string
	revoked       chan struct{}
	revokeTimer   *time.Timer
	told          map[string]bool

	// signals hands the watch's signals on (sends under sigMu; closed when the lease is over).
	signals   chan Signal
	sigMu     sync.Mutex
	sigClosed bool
	// lastEventID is the last watch event's id (the watch goroutine's own): a reopened
	// watch sends it as Last-Event-ID.
	lastEventID string
}

// startLease keeps a granted lease: its heartbeats and its watch (told SignalExpiring at
// slack before its end; zero: the client's WithExpiringSlack).
func (c *Client) startLease(ctx context.Context, p place, g *grantJSON, token string, sent time.Time, slack time.Duration) (*Lease, error) {
	if token == "" {
		token = g.Token
	}
	if token == "" || g.LeaseID == "" {
		return nil, errNoToken
	}
	ttl := time.Duration(g.TTLms) * time.Millisecond
	if ttl <= 0 {
		ttl = 30 * time.Second
	}
	count := g.ReentryCount
	if count == 0 {
		count = 1 // a multilease's grant counts no levels: it has one
	}
	kind := g.Kind
	if slack <= 0 {
		slack = c.expiringSlack
	}
	if p.shape == shapeMultilease {
		kind = "multilease"
	}
	l := &Lease{
		c: c, place: p, id: g.LeaseID, token: token, kind: kind,
		fence: g.FencingToken, permits: g.Permits, holder: g.Holder, members: g.Members,
		lost: make(chan struct{}), keeperDone: make(chan struct{}), watchDone: make(chan struct{}),
		revoked: make(chan struct{}), signals: make(chan Signal, signalBufferSize),
		ttl: ttl, count: count, renewedAt: sent, acked: g.acked.withMembers(g.Members), slack: slack,
	}
	l.ctx, l.cancel = context.WithCancel(ctx)
	l.inner, l.stopInner = context.WithCancel(context.Background())
	go l.heartbeatLoop()
	if c.watch {
		go l.watchLoop()
	} else {
		close(l.watchDone)
	}
	return l, nil
}

func (l *Lease) leasePath() string { return l.place.leasePath(l.id) }

// markLost records the loss, cancels the work's context and stops the renewals and the watch.
func (l *Lease) markLost(e *LostError) {
	l.mu.Lock()
	if l.lostErr != nil || l.over || (l.releasing && e.Reason == "released") {
		l.mu.Unlock()
		return
	}
	e.Lock, e.LeaseID, e.At = l.place.name, l.id, time.Now()
	if e.Member == "" && e.Problem != nil {
		e.Member = e.Problem.Member
	}
	if e.Revocation == nil && l.revocation != nil {
		r := *l.revocation
		e.Revocation = &r
	}
	l.lostErr = e
	if l.revokeTimer != nil {
		l.revokeTimer.Stop()
	}
	l.mu.Unlock()
	close(l.lost) // before the work's context: whoever sees it cancelled finds Lost closed
	l.cancel()
	l.stopInner()
	l.closeSignals()
}

// lostFrom turns an answer that says the lease is gone (410, 404, 403 token_mismatch) into a
// LostError; nil for any other error.
func lostFrom(err error) *LostError {
	var p *Problem
	if !errors.As(err, &p) {
		return nil
	}
	switch {
	case p.Status == http.StatusGone:
		reason := p.Reason
		if reason == "" {
			reason = p.Code
		}
		return &LostError{Reason: reason, Problem: p}
	case p.Status == http.StatusNotFound && p.Code == CodeLeaseNotFound,
		p.Status == http.StatusForbidden && p.Code == CodeTokenMismatch:
		return &LostError{Reason: ReasonNotFound, Problem: p}
	}
	return nil
}

type renewalJSON struct {
	TTLms        int64    `json:"ttl_ms"`
	ReentryCount int      `json:"reentry_count"`
	Members      []Member `json:"members"` // a multilease's: a revoked one's Revocation set
	Term         int64    `json:"term"`    // an election term's
	// Revocation: an operator asked the holder to let go; TTLms then stops at its deadline.
	Revocation *Revocation `json:"revocation"`
	acked
}

// revocations are the ones the answer carries, each as the signal that tells it: a lease's
// (naming lock), or each revoked member's of a multilease (an operator's revocation of a
// member comes on its entry, none at top level; TTLms stops at the earliest deadline), naming
// that member as its watch would.
func (r *renewalJSON) revocations(lock string) []Signal {
	if r.Revocation != nil {
		return []Signal{{Lock: lock, Revocation: r.Revocation}}
	}
	var told []Signal
	for _, m := range r.Members {
		if m.Revocation != nil {
			told = append(told, Signal{Lock: m.Lock, Revocation: m.Revocation})
		}
	}
	return told
}

// heartbeatLoop renews the lease every TTL/3 (counted from when the last renewal was sent).
// Failures are retried until only lossMargin(TTL) would be left: then the lease is given up as lost
// (ReasonUnrenewable), before the server may grant it to someone else.
func (l *Lease) heartbeatLoop() {
	defer close(l.keeperDone)
	path := l.leasePath() + "/heartbeat"
	var query url.Values
	if l.place.shape == shapeElection {
		// A leader names its term: should Redis have lost the grant and put the candidate
		// back in line, the server answers 410 instead of leading it into a new term.
		query = url.Values{"term": {strconv.FormatInt(l.fence, 10)}}
	}
	for {
		l.mu.Lock()
		ttl, last := l.ttl, l.renewedAt
		l.mu.Unlock()
		t := time.NewTimer(time.Until(last.Add(ttl / 3)))
		select {
		case <-l.inner.Done():
			t.Stop()
			return
		case <-t.C:
		}
		lossAt := last.Add(ttl - lossMargin(ttl))
		var lastErr error
		for attempt := 0; ; attempt++ {
			hctx, cancel := context.WithDeadline(l.inner, lossAt)
			resp, err := l.c.do(hctx, &request{method: http.MethodPost, path: path, query: query, bearer: l.token, retry: true, window: ttl})
			cancel()
			if l.inner.Err() != nil {
				return
			}
			if err == nil {
				var r renewalJSON
				if json.Unmarshal(resp.body, &r) == nil {
					if l.place.shape == shapeElection && r.Term != 0 && r.Term != l.fence {
						// Never adopt a new term silently: the held one is over.
						l.markLost(&LostError{Reason: ReasonTermChanged,
							Cause: fmt.Errorf("the heartbeat of term %d answered term %d", l.fence, r.Term)})
						return
					}
					told := r.revocations(l.place.name)
					for _, s := range told {
						l.noteRevocation(s.Revocation, s)
					}
					l.mu.Lock()
					// A reentry meanwhile may have renewed it later; keep the later time.
					if resp.sent.After(l.renewedAt) {
						l.renewedAt = resp.sent
					}
					// Under a revocation ttl_ms is what is left until its deadline, not the
					// lease's TTL: the revocation's own timer ends the lease before then.
					if r.TTLms > 0 && len(told) == 0 {
						l.ttl = time.Duration(r.TTLms) * time.Millisecond
					}
					if l.place.levels() {
						l.count = r.ReentryCount
					}
					l.acked = r.acked.withMembers(r.Members)
					l.mu.Unlock()
				}
				break
			}
			if lost := lostFrom(err); lost != nil {
				l.markLost(lost)
				return
			}
			if !errors.Is(err, context.DeadlineExceeded) || lastErr == nil {
				lastErr = err
			}
			if !time.Now().Before(lossAt) {
				l.markLost(&LostError{Reason: ReasonUnrenewable,
					Cause: fmt.Errorf("no heartbeat succeeded for %v of its %v TTL: %w", time.Since(last).Round(time.Millisecond), ttl, lastErr)})
				return
			}
			// A refusal do does not retry (401 after a key was revoked, a quota): try again
			// until the lease would expire; the operator may fix it meanwhile.
			d := backoff(attempt)
			if left := time.Until(lossAt); d > left {
				d = left
			}
			select {
			case <-l.inner.Done():
				return
			case <-time.After(d):
			}
		}
	}
}

// finish ends the lease locally: no more renewals or watch, the work's context cancelled.
func (l *Lease) finish() {
	l.mu.Lock()
	l.over = true
	if l.revokeTimer != nil {
		l.revokeTimer.Stop()
	}
	l.mu.Unlock()
	l.stopInner()
	l.cancel()
	<-l.keeperDone
	<-l.watchDone
	l.closeSignals()
}

type releaseJSON struct {
	Released     bool `json:"released"`
	ReentryCount int  `json:"reentry_count"`
}

// Release gives the lease back (every reentry level) and stops its renewals, whatever the
// answer. It is sent even when ctx is already done (bounded then by the request timeout), so
// `defer lease.Release(ctx)` releases on every way out; a 503 or a dropped connection is
// retried with the same Idempotency-Key. Calling it again does nothing.
//
// It returns the *LostError when the lease had been lost before (the work ran, at least in
// part, without the lock), else an error only when the release could not be sent (the lease
// then runs out at the end of its TTL).
func (l *Lease) Release(ctx context.Context) error {
	l.relMu.Lock()
	defer l.relMu.Unlock()
	l.mu.Lock()
	if l.over {
		l.mu.Unlock()
		return l.Err()
	}
	l.releasing = true
	lost := l.lostErr
	l.mu.Unlock()
	l.stopInner() // no heartbeat may race the release
	var err error
	// A lost multilease is released all the same: the server then gives its other locks back
	// at once, instead of at the end of their TTL.
	// So is a term whose heartbeat answered another term: the candidate leads that one now.
	// So is a lease this client gave up before its revocation's deadline: the server would
	// hold it until then.
	if lost == nil || lost.Reason == ReasonUnrenewable || lost.Reason == ReasonTermChanged || lost.givenUp ||
		l.place.shape == shapeMultilease {
		rctx, cancel := detached(ctx, l.c.reqTimeout)
		// A multilease's release takes no key: sent again, it answers 410 released, as
		// the first one did (see below).
		_, err = l.c.do(rctx, &request{method: http.MethodDelete, path: l.leasePath(), query: l.place.releaseQuery(),
			bearer: l.token, idemKey: l.place.releaseKey(), retry: true})
		cancel()
		if gone := lostFrom(err); gone != nil {
			err = nil
			if gone.Reason != "released" && lost == nil {
				// It was lost before our release arrived (force-released, expired).
				l.mu.Lock()
				l.releasing = false
				l.mu.Unlock()
				l.markLost(gone)
			}
		}
	}
	l.finish()
	if lostErr := l.Err(); lostErr != nil {
		return lostErr
	}
	return err
}

// ReleaseLevel releases one reentry level (for a read/write lease, of mode KindRead or
// KindWrite; "" releases the write hold first). It returns the levels left; at 0 the lease is
// over, as after Release. Releasing one level of several renews the lease.
func (l *Lease) ReleaseLevel(ctx context.Context, mode Kind) (int, error) {
	if !l.place.levels() {
		return 0, fmt.Errorf("leasehold: a %s lease has no levels: use Release", l.kind)
	}
	l.relMu.Lock()
	defer l.relMu.Unlock()
	l.mu.Lock()
	if l.over || l.lostErr != nil {
		l.mu.Unlock()
		if err := l.Err(); err != nil {
			return 0, err
		}
		return 0, errClosed
	}
	l.releasing = true
	l.mu.Unlock()
	var q url.Values
	if mode != "" {
		q = url.Values{"mode": {string(mode)}}
	}
	rctx, cancel := detached(ctx, l.c.reqTimeout)
	resp, err := l.c.do(rctx, &request{method: http.MethodDelete, path: l.leasePath(), query: q, bearer: l.token,
		idemKey: newKey(), retry: true})
	cancel()
	if err != nil {
		gone := lostFrom(err)
		if gone != nil && gone.Reason == "released" {
			l.finish() // a retried release that had ended it already
			return 0, nil
		}
		l.mu.Lock()
		l.releasing = false
		l.mu.Unlock()
		if gone != nil {
			l.markLost(gone)
			return 0, l.Err()
		}
		return l.ReentryCount(), err
	}
	var r releaseJSON
	if err := decode(resp, &r); err != nil {
		return 0, err
	}
	if r.Released {
		l.finish()
		return 0, nil
	}
	l.mu.Lock()
	l.releasing = false
	l.count = r.ReentryCount
	if resp.sent.After(l.renewedAt) {
		l.renewedAt = resp.sent
	}
	l.mu.Unlock()
	return r.ReentryCount, nil
}

// Reenter takes the lock once more with this lease (reentrant, fair and read/write locks):
// the same lease and fencing token, one more level to release. It returns the new count.
func (l *Lease) Reenter(ctx context.Context) (int, error) { return l.ReenterAs(ctx, "") }

// ReenterAs re-enters with another kind: KindRead on a write lease downgrades it (it then
// holds both; releasing the write hold leaves the read hold). "" is the lease's own kind.
func (l *Lease) ReenterAs(ctx context.Context, kind Kind) (int, error) {
	if !l.place.levels() {
		return 0, fmt.Errorf("leasehold: %s leases do not re-enter", l.kind)
	}
	l.relMu.Lock()
	defer l.relMu.Unlock()
	l.mu.Lock()
	if l.over || l.lostErr != nil {
		l.mu.Unlock()
		if err := l.Err(); err != nil {
			return 0, err
		}
		return 0, errClosed
	}
	l.mu.Unlock()
	body := &acquireBody{Kind: kind}
	resp, err := l.c.do(ctx, &request{method: http.MethodPost, path: l.place.collection, body: body, bearer: l.token,
		idemKey: newKey(), retry: true})
	if err != nil {
		if gone := lostFrom(err); gone != nil && gone.Problem != nil && gone.Problem.Code == CodeLeaseLost {
			l.markLost(gone)
		}
		return 0, err
	}
	var g grantJSON
	if err := decode(resp, &g); err != nil {
		return 0, err
	}
	l.mu.Lock()
	l.count = g.ReentryCount
	if g.TTLms > 0 {
		l.ttl = time.Duration(g.TTLms) * time.Millisecond
	}
	if resp.sent.After(l.renewedAt) {
		l.renewedAt = resp.sent
	}
	l.mu.Unlock()
	return g.ReentryCount, nil
}

// lossMargin is what is left of a lease's TTL when renewals that keep failing give it up as
// lost (clients/PROTOCOL.md): a sixth of the TTL, at least a second, at most a third. Given
// up then, before the server may grant the lock to someone else.
func lossMargin(ttl time.Duration) time.Duration {
	m := ttl / 6
	if m < time.Second {
		m = time.Second
	}
	if m > ttl/3 {
		m = ttl / 3
	}
	return m
}
