package leasehold_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	leasehold "github.com/leasehold/leasehold/clients/go"
)

// nextSignal waits up to d for a signal of kind on ch (others are skipped).
func nextSignal(t *testing.T, ch <-chan leasehold.Signal, kind string, d time.Duration) leasehold.Signal {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case s, ok := <-ch:
			if !ok {
				t.Fatalf("the signals ended before %s", kind)
			}
			if s.Kind == kind {
				return s
			}
		case <-deadline:
			t.Fatalf("no %s signal within %v", kind, d)
		}
	}
}

// An operator revokes a held lock; the holder hears it (reason, deadline), releases in time,
// and the lease was never lost.
func TestRevocationHonoured(t *testing.T) {
	c, ct := countingClient(t)
	ctx, name, admin := testCtx(t), lockName(t), adminClient(t)
	lease, err := c.Lock(ctx, name, leasehold.LockOptions{TTL: 10 * time.Second, Holder: "worker-1"})
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	if lease.Revocation() != nil {
		t.Fatal("a revocation before anyone asked")
	}
	waitFor(t, 5*time.Second, "the watch open", func() bool { return ct.watchesOpen() >= 1 })

	asked := time.Now()
	res, err := admin.Revoke(ctx, name, 20*time.Second, leasehold.RevokeReason("deploy v2"), leasehold.RevokeLease(lease.ID()))
	if err != nil {
		t.Fatal(err)
	}
	if res.Lock != name || len(res.Leases) != 1 {
		t.Fatalf("revoke answered %+v", res)
	}
	got := res.Leases[0]
	if got.LeaseID != lease.ID() || got.Holder != "worker-1" || got.FencingToken != lease.FencingToken() || got.Again ||
		got.Revocation.Reason != "deploy v2" || got.Revocation.RequestedBy == "" {
		t.Fatalf("revoked lease: %+v", got)
	}
	if d := got.Revocation.Deadline.Sub(asked); d < 19*time.Second || d > 22*time.Second {
		t.Fatalf("deadline %v after the request, want about 20 s", d)
	}

	s := nextSignal(t, lease.Signals(), leasehold.SignalRevocationRequested, 5*time.Second)
	if s.Revocation == nil || s.Revocation.Reason != "deploy v2" || !s.Revocation.Deadline.Equal(got.Revocation.Deadline) || s.ID == "" {
		t.Fatalf("revocation signal: %+v (revocation %+v)", s, s.Revocation)
	}
	select {
	case <-lease.RevocationRequested():
	default:
		t.Fatal("RevocationRequested not closed after the signal")
	}
	if r := lease.Revocation(); r == nil || !r.Deadline.Equal(got.Revocation.Deadline) || r.RequestedBy != got.Revocation.RequestedBy {
		t.Fatalf("lease.Revocation() = %+v", r)
	}

	// Asked again: the first deadline and reason stand.
	again, err := admin.Revoke(ctx, name, time.Second, leasehold.RevokeReason("sooner"))
	if err != nil {
		t.Fatal(err)
	}
	if len(again.Leases) != 1 || !again.Leases[0].Again || !again.Leases[0].Revocation.Deadline.Equal(got.Revocation.Deadline) ||
		again.Leases[0].Revocation.Reason != "deploy v2" {
		t.Fatalf("revoked again: %+v", again)
	}

	// Released in time: no loss.
	if err := lease.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	if lease.Err() != nil {
		t.Fatalf("released in time, yet lost: %v", lease.Err())
	}
	select {
	case <-lease.Lost():
		t.Fatal("Lost closed after a release in time")
	default:
	}
	for range lease.Signals() { // closed once the lease is over
	}
	if info := inspect(t, c, name); info.Held {
		t.Fatalf("still held after the release: %+v", info)
	}
}

// A revocation ignored: the lease is given up as lost (revoked) before the deadline, so the
// work stops before the server may grant the lock to anyone else; Release gives it back.
func TestRevocationIgnored(t *testing.T) {
	for _, watch := range []bool{true, false} {
		watch := watch
		label := "watch"
		var opts []leasehold.Option
		if !watch {
			// Told by a heartbeat's answer instead (TTL 3 s: every second).
			label, opts = "heartbeat", []leasehold.Option{leasehold.WithoutWatch()}
		}
		t.Run(label, func(t *testing.T) {
			c, ctx, name, admin := newClient(t, opts...), testCtx(t), lockName(t), adminClient(t)
			lease, err := c.Lock(ctx, name, leasehold.LockOptions{TTL: 3 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer lease.Release(ctx)
			time.Sleep(100 * time.Millisecond) // the watch open
			res, err := admin.Revoke(ctx, name, 3*time.Second, leasehold.RevokeReason("maintenance"))
			if err != nil {
				t.Fatal(err)
			}
			deadline := res.Leases[0].Revocation.Deadline
			assertGivenUpAsRevoked(t, lease, "maintenance", deadline)
			select {
			case <-lease.Context().Done():
			case <-time.After(time.Second):
				t.Fatal("the lease's context not cancelled on the loss")
			}
			releaseGivenUp(t, c, ctx, lease, name)
		})
	}
}

// Without the watch, a multilease hears an operator's revocation of one member from its
// heartbeat's answer (on that member's entry): told once, naming the member's lock, and the
// lease is given up as lost (revoked) before the deadline.
func TestMultileaseMemberRevocationByHeartbeat(t *testing.T) {
	c, ctx, admin := newClient(t, leasehold.WithoutWatch()), testCtx(t), adminClient(t)
	a, b := lockName(t)+"-a", lockName(t)+"-b"
	// TTL 3 s: a heartbeat every second.
	locks := []leasehold.MultiLock{{Name: a}, {Name: b}}
	lease, err := c.Multilease(ctx, locks, leasehold.MultiOptions{TTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	res, err := admin.Revoke(ctx, b, 4*time.Second, leasehold.RevokeReason("rebalance"))
	if err != nil {
		t.Fatal(err)
	}
	deadline := res.Leases[0].Revocation.Deadline
	select {
	case <-lease.RevocationRequested():
	case <-time.After(2500 * time.Millisecond):
		t.Fatal("no heartbeat told the member's revocation within 2.5 s")
	}
	if r := lease.Revocation(); r == nil || r.Reason != "rebalance" || !r.Deadline.Equal(deadline) {
		t.Fatalf("lease.Revocation() = %+v", r)
	}
	select {
	case <-lease.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("not lost within 5 s of a 4 s revocation")
	}
	var lost *leasehold.LostError
	if !errors.As(lease.Err(), &lost) || lost.Reason != leasehold.ReasonRevoked {
		t.Fatalf("lost with %v, want reason revoked", lease.Err())
	}
	if !lost.At.Before(deadline) {
		t.Fatalf("given up at %v, not before the deadline %v", lost.At, deadline)
	}
	_ = lease.Release(ctx)
	var told []leasehold.Signal
	for s := range lease.Signals() { // closed once the lease is over
		if s.Kind == leasehold.SignalRevocationRequested {
			told = append(told, s)
		}
	}
	if len(told) != 1 || told[0].Lock != b || told[0].ID != "" || told[0].Revocation == nil ||
		told[0].Revocation.Reason != "rebalance" {
		t.Fatalf("revocation signals: %+v", told)
	}
}

// watchCutter ends the first watch stream after its first event (as a proxy might) and
// records the Last-Event-ID of every watch request.
type watchCutter struct {
	base    http.RoundTripper
	mu      sync.Mutex
	watches []string // each watch request's Last-Event-ID
}

func (c *watchCutter) RoundTrip(r *http.Request) (*http.Response, error) {
	if !strings.HasSuffix(r.URL.Path, "/watch") {
		return c.base.RoundTrip(r)
	}
	c.mu.Lock()
	c.watches = append(c.watches, r.Header.Get("Last-Event-ID"))
	first := len(c.watches) == 1
	c.mu.Unlock()
	resp, err := c.base.RoundTrip(r)
	if err == nil && first && resp.StatusCode == http.StatusOK {
		resp.Body = &cutAfterEvent{ReadCloser: resp.Body}
	}
	return resp, err
}

func (c *watchCutter) seen() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.watches...)
}

// cutAfterEvent reads up to the end of the first event with an id, then reports the stream
// broken.
type cutAfterEvent struct {
	io.ReadCloser
	buf []byte
	cut bool
}

func (b *cutAfterEvent) Read(p []byte) (int, error) {
	if b.cut {
		return 0, io.ErrUnexpectedEOF
	}
	n, err := b.ReadCloser.Read(p)
	b.buf = append(b.buf, p[:n]...)
	if i := bytes.Index(b.buf, []byte("\nid: ")); i >= 0 && bytes.Contains(b.buf[i:], []byte("\n\n")) {
		b.cut = true
	}
	return n, err
}

// Of its members' revocations a multilease keeps the one with the earliest deadline
// (clients/parity.json multileaseRevocationEarliestDeadline): a later-told one with an earlier
// deadline replaces it, one with a later deadline changes nothing; the lease is given up at
// the kept deadline less the margin, its LostError naming that member, and each member shows
// its own revocation.
func TestMultileaseKeepsTheEarliestRevocation(t *testing.T) {
	c, ctx, admin := newClient(t), testCtx(t), adminClient(t)
	a, b, cc := lockName(t)+"-a", lockName(t)+"-b", lockName(t)+"-c"
	locks := []leasehold.MultiLock{{Name: a}, {Name: b}, {Name: cc}}
	lease, err := c.Multilease(ctx, locks, leasehold.MultiOptions{TTL: 3 * time.Second}) // margin 1 s
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	time.Sleep(100 * time.Millisecond) // the watch open
	revoke := func(name string, grace time.Duration, reason string) time.Time {
		res, err := admin.Revoke(ctx, name, grace, leasehold.RevokeReason(reason))
		if err != nil {
			t.Fatal(err)
		}
		s := nextSignal(t, lease.Signals(), leasehold.SignalRevocationRequested, 3*time.Second)
		if s.Lock != name || s.Revocation == nil || s.Revocation.Reason != reason {
			t.Fatalf("the signal of %s's revocation: %+v", name, s)
		}
		return res.Leases[0].Revocation.Deadline
	}
	first := revoke(a, 8*time.Second, "first")
	if r := lease.Revocation(); r == nil || !r.Deadline.Equal(first) {
		t.Fatalf("after the first revocation, lease.Revocation() = %+v", r)
	}
	second := revoke(b, 3*time.Second, "second")
	if r := lease.Revocation(); r == nil || !r.Deadline.Equal(second) || r.Reason != "second" {
		t.Fatalf("an earlier deadline told later is not kept: lease.Revocation() = %+v", r)
	}
	revoke(cc, 6*time.Second, "third") // later than the kept one: nothing changes
	if r := lease.Revocation(); r == nil || !r.Deadline.Equal(second) {
		t.Fatalf("a later deadline replaced the earlier one: lease.Revocation() = %+v", r)
	}
	select {
	case <-lease.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("not lost within 5 s of a 3 s revocation")
	}
	var lost *leasehold.LostError
	if !errors.As(lease.Err(), &lost) || lost.Reason != leasehold.ReasonRevoked {
		t.Fatalf("lost with %v, want reason revoked", lease.Err())
	}
	// b's deadline less the margin (a's would be 7 s after it was asked).
	if !lost.At.Before(second.Add(-500*time.Millisecond)) || lost.At.Before(second.Add(-1500*time.Millisecond)) {
		t.Fatalf("given up at %v, not b's deadline %v less the 1 s margin", lost.At, second)
	}
	if lost.Member != b || !strings.Contains(lost.Error(), b) || lost.Revocation == nil || lost.Revocation.Reason != "second" {
		t.Fatalf("the loss does not name the member whose revocation ended it (%s): %v, %+v", b, lost, lost.Revocation)
	}
	shown := map[string]string{}
	for _, m := range lease.Members() {
		if m.Revocation != nil {
			shown[m.Lock] = m.Revocation.Reason
		}
	}
	if want := map[string]string{a: "first", b: "second", cc: "third"}; !reflect.DeepEqual(shown, want) {
		t.Fatalf("the members' revocations: %v, want %v", shown, want)
	}
}

// Another caller waits: the holder hears contended (with the number waiting); a stream cut
// after it is opened again with Last-Event-ID, and the count goes on from there.
func TestContendedAndLastEventID(t *testing.T) {
	ct := &watchCutter{base: http.DefaultTransport.(*http.Transport).Clone()}
	c := newClient(t, leasehold.WithHTTPClient(&http.Client{Transport: ct}))
	other, ctx, name := newClient(t), testCtx(t), lockName(t)
	lease, err := c.Lock(ctx, name, leasehold.LockOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	waitFor(t, 5*time.Second, "the watch open", func() bool { return len(ct.seen()) >= 1 })
	time.Sleep(100 * time.Millisecond)

	ch := make(chan result, 1)
	go func() {
		l, err := other.Lock(ctx, name, leasehold.LockOptions{TTL: 10 * time.Second, Wait: 15 * time.Second})
		ch <- result{l, err, time.Now()}
	}()
	s := nextSignal(t, lease.Signals(), leasehold.SignalContended, 5*time.Second)
	if s.Waiters < 1 || s.ID != "1" || s.Lock != name {
		t.Fatalf("first contended: %+v", s)
	}
	// The stream was cut after that event: opened again with its id, the server tells the
	// waiters again, counting on.
	s = nextSignal(t, lease.Signals(), leasehold.SignalContended, 5*time.Second)
	if s.ID == "1" || s.ID == "" {
		t.Fatalf("the reopened watch counted again from the start: %+v", s)
	}
	if seen := ct.seen(); len(seen) < 2 || seen[0] != "" || seen[1] != "1" {
		t.Fatalf("the watches' Last-Event-ID: %q, want \"\" then \"1\"", seen)
	}

	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := recv(t, ch, 10*time.Second, "the waiter's grant")
	if r.err != nil {
		t.Fatal(r.err)
	}
	_ = r.lease.Release(ctx)
}

// Revoke's refusals are typed: a free name, a lease that does not hold it, a grace over an hour.
func TestRevokeRefused(t *testing.T) {
	c, ctx, name, admin := newClient(t), testCtx(t), lockName(t), adminClient(t)
	_, err := admin.Revoke(ctx, name, time.Second)
	var p *leasehold.Problem
	if !errors.As(err, &p) || p.Code != leasehold.CodeLockNotFound || p.Status != http.StatusNotFound {
		t.Fatalf("revoke of a free name: %v", err)
	}
	lease, err := c.Lock(ctx, name, leasehold.LockOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	if _, err := admin.Revoke(ctx, name, time.Second, leasehold.RevokeLease("00000000-0000-4000-8000-000000000000")); !isCode(err, leasehold.CodeLeaseNotFound) {
		t.Fatalf("revoke of a lease that does not hold it: %v", err)
	}
	if _, err := admin.Revoke(ctx, name, 2*time.Hour); !isCode(err, leasehold.CodeInvalidBody) {
		t.Fatalf("revoke with a grace of 2 h: %v", err)
	}
	if _, err := c.Revoke(ctx, name, time.Second); !errors.As(err, &p) || p.Status != http.StatusUnauthorized {
		t.Fatalf("revoke without the admin token: %v", err)
	}
	if lease.Revocation() != nil {
		t.Fatal("a refused revocation reached the holder")
	}
}

// A leader asked to resign hears it on its term, resigns in time, and was never lost.
func TestTermRevocation(t *testing.T) {
	c, ctx, name := newClient(t), testCtx(t), lockName(t)
	term, err := c.Campaign(ctx, name, leasehold.CampaignTTL(10*time.Second), leasehold.CampaignWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer term.Resign(ctx)
	time.Sleep(100 * time.Millisecond) // the watch open
	// The client offers no call for an election's revoke yet: the route, by hand.
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost,
		serverURL(t)+"/v1/admin/elections/"+url.PathEscape(name)+"/revoke", strings.NewReader(`{"grace_ms": 20000, "reason": "move"}`))
	req.Header.Set("Authorization", "Bearer "+adminToken(t))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("revoke the leader: %d", resp.StatusCode)
	}
	select {
	case <-term.RevocationRequested():
	case <-time.After(5 * time.Second):
		t.Fatal("the leader did not hear the revocation within 5 s")
	}
	s := nextSignal(t, term.Signals(), leasehold.SignalRevocationRequested, time.Second)
	if r := term.Revocation(); r == nil || r.Reason != "move" || s.Revocation == nil || s.Revocation.Reason != "move" {
		t.Fatalf("term revocation %+v, signal %+v", r, s)
	}
	if err := term.Resign(ctx); err != nil || term.Err() != nil {
		t.Fatalf("resign: %v, err %v", err, term.Err())
	}
}
