package leasehold

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Lease is a held lock (or semaphore permits). While it is held, the client renews it every
// TTL/3 and keeps its watch stream open; Context is cancelled the moment it is lost. Call
// Release when the work is done (defer it): that is the only way its renewals stop.
type Lease struct {
	c       *Client
	base    string // "/v1/locks/<name>" or "/v1/semaphores/<name>"
	name    string
	id      string
	token   string
	kind    string
	fence   int64
	permits int
	holder  string

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
	lostErr   *LostError
	releasing bool // a release of ours is under way: its "released" is no loss
	over      bool
}

func (c *Client) startLease(ctx context.Context, base, name string, g *grantJSON, token string, sent time.Time) (*Lease, error) {
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
	l := &Lease{
		c: c, base: base, name: name, id: g.LeaseID, token: token, kind: g.Kind,
		fence: g.FencingToken, permits: g.Permits, holder: g.Holder,
		lost: make(chan struct{}), keeperDone: make(chan struct{}), watchDone: make(chan struct{}),
		ttl: ttl, count: g.ReentryCount, renewedAt: sent,
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

// Name is the lock's (or semaphore's) name.
func (l *Lease) Name() string { return l.name }

// ID is the lease's id.
func (l *Lease) ID() string { return l.id }

// Token is the lease's bearer token, the proof of the lease: keep it as secret as an API key.
func (l *Lease) Token() string { return l.token }

// FencingToken grows with every new lease of the lock: pass it to the resource you protect,
// which refuses writes with a smaller token than the largest it has seen.
func (l *Lease) FencingToken() int64 { return l.fence }

// Kind is the lease's kind: reentrant, exclusive, fair, read, write or semaphore.
func (l *Lease) Kind() string { return l.kind }

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

func (l *Lease) leasePath() string { return l.base + "/leases/" + url.PathEscape(l.id) }

// markLost records the loss, cancels the work's context and stops the renewals and the watch.
func (l *Lease) markLost(e *LostError) {
	l.mu.Lock()
	if l.lostErr != nil || l.over || (l.releasing && e.Reason == "released") {
		l.mu.Unlock()
		return
	}
	e.Lock, e.LeaseID, e.At = l.name, l.id, time.Now()
	l.lostErr = e
	close(l.lost)
	l.mu.Unlock()
	l.cancel()
	l.stopInner()
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
	TTLms        int64 `json:"ttl_ms"`
	ReentryCount int   `json:"reentry_count"`
}

// heartbeatLoop renews the lease every TTL/3 (counted from when the last renewal was sent).
// Failures are retried until only TTL/6 would be left: then the lease is given up as lost
// (ReasonUnrenewable), before the server may grant it to someone else.
func (l *Lease) heartbeatLoop() {
	defer close(l.keeperDone)
	path := l.leasePath() + "/heartbeat"
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
		lossAt := last.Add(ttl - ttl/6)
		var lastErr error
		for attempt := 0; ; attempt++ {
			hctx, cancel := context.WithDeadline(l.inner, lossAt)
			resp, err := l.c.do(hctx, &request{method: http.MethodPost, path: path, bearer: l.token, retry: true, window: ttl})
			cancel()
			if l.inner.Err() != nil {
				return
			}
			if err == nil {
				var r renewalJSON
				if json.Unmarshal(resp.body, &r) == nil {
					l.mu.Lock()
					// A reentry meanwhile may have renewed it later; keep the later time.
					if resp.sent.After(l.renewedAt) {
						l.renewedAt = resp.sent
					}
					if r.TTLms > 0 {
						l.ttl = time.Duration(r.TTLms) * time.Millisecond
					}
					l.count = r.ReentryCount
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

type lostEventJSON struct {
	Reason string `json:"reason"`
}

// watchLoop keeps the lease's watch stream open; a stream that ends without "lost" is opened
// again.
func (l *Lease) watchLoop() {
	defer close(l.watchDone)
	attempt := 0
	for l.inner.Err() == nil {
		opened := time.Now()
		final, retryAfter := l.watchOnce()
		if final {
			return
		}
		if time.Since(opened) > 10*time.Second {
			attempt = 0
		}
		d := retryAfter
		if d == 0 {
			d = backoff(attempt)
		}
		attempt++
		select {
		case <-l.inner.Done():
			return
		case <-time.After(d):
		}
	}
}

// watchOnce reads one watch stream; final is true when watching is over (the lease is lost
// or released, or the server refuses to let us watch: the heartbeats still tell then).
func (l *Lease) watchOnce() (final bool, retryAfter time.Duration) {
	ctx, cancel := context.WithCancel(l.inner)
	defer cancel()
	// No keep-alive comment for three of the server's intervals (15 s): the connection is dead.
	idle := time.AfterFunc(l.c.watchIdle, cancel)
	defer idle.Stop()
	req, err := l.c.newHTTPRequest(ctx, &request{method: http.MethodGet, path: l.leasePath() + "/watch", bearer: l.token})
	if err != nil {
		return true, 0
	}
	req.Header.Set("Accept", "text/event-stream")
	hr, err := l.c.http.Do(req)
	if err != nil {
		return false, 0
	}
	defer hr.Body.Close()
	if hr.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(hr.Body, 64<<10))
		p := parseProblem(hr.StatusCode, hr.Header, body)
		if lost := lostFrom(p); lost != nil {
			l.markLost(lost)
			return true, 0
		}
		if p.Retryable() || p.Status == http.StatusConflict {
			return false, p.RetryAfter
		}
		return true, 0
	}
	br := bufio.NewReader(hr.Body)
	var event, data string
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return false, 0
		}
		idle.Reset(l.c.watchIdle)
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			if event == "lost" {
				var ev lostEventJSON
				_ = json.Unmarshal([]byte(data), &ev)
				if ev.Reason == "" {
					ev.Reason = "lost"
				}
				l.markLost(&LostError{Reason: ev.Reason})
				return true, 0
			}
			event, data = "", ""
			continue
		}
		if strings.HasPrefix(line, ":") {
			continue // keep-alive comment
		}
		field, value := line, ""
		if i := strings.IndexByte(line, ':'); i >= 0 {
			field, value = line[:i], strings.TrimPrefix(line[i+1:], " ")
		}
		switch field {
		case "event":
			event = value
		case "data":
			if data != "" {
				data += "\n"
			}
			data += value
		}
	}
}

// finish ends the lease locally: no more renewals or watch, the work's context cancelled.
func (l *Lease) finish() {
	l.mu.Lock()
	l.over = true
	l.mu.Unlock()
	l.stopInner()
	l.cancel()
	<-l.keeperDone
	<-l.watchDone
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
	if lost == nil || lost.Reason == ReasonUnrenewable {
		rctx, cancel := detached(ctx, l.c.reqTimeout)
		_, err = l.c.do(rctx, &request{method: http.MethodDelete, path: l.leasePath(), query: url.Values{"all": {"true"}},
			bearer: l.token, idemKey: newKey(), retry: true})
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
	if strings.HasPrefix(l.base, "/v1/semaphores/") {
		return 0, errors.New("leasehold: semaphore leases do not re-enter")
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
	resp, err := l.c.do(ctx, &request{method: http.MethodPost, path: l.base + "/leases", body: body, bearer: l.token,
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
