package leasehold_test

import (
	"context"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	leasehold "github.com/leasehold/leasehold/clients/go"
)

// holdBriefly makes n past holds of name (about 300 ms each): what the server estimates a
// wait from. (Before any refusal of the name: the server reads its hold times at most once a
// second.)
func holdBriefly(t *testing.T, c *leasehold.Client, ctx context.Context, name string, kind leasehold.Kind, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		l, err := c.Lock(ctx, name, leasehold.LockOptions{Kind: kind, TTL: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// refusal is the lock_held a try (no wait) of name gets.
func refusal(t *testing.T, c *leasehold.Client, ctx context.Context, name string) *leasehold.Problem {
	t.Helper()
	_, err := c.Lock(ctx, name, leasehold.LockOptions{})
	var p *leasehold.Problem
	if !errors.As(err, &p) || p.Code != leasehold.CodeLockHeld {
		t.Fatalf("want lock_held, got %v", err)
	}
	return p
}

func TestLockHeldSaysWhy(t *testing.T) {
	c, ctx, name := newClient(t), testCtx(t), lockName(t)
	first, err := c.Lock(ctx, name+"-new", leasehold.LockOptions{TTL: 5 * time.Second, Holder: "first"})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	p := refusal(t, c, ctx, name+"-new")
	_ = first.Release(ctx)
	if p.Holder != "first" || !strings.HasSuffix(p.HeldSince, "Z") || p.HeldFor < 100*time.Millisecond {
		t.Fatalf("refused: holder %q, held since %q, for %v", p.Holder, p.HeldSince, p.HeldFor)
	}
	if _, told := p.Extra["estimated_wait_ms"]; told || p.EstimatedWait != 0 {
		t.Fatalf("an estimate without past holds: %v", p.EstimatedWait)
	}

	holdBriefly(t, c, ctx, name, leasehold.KindReentrant, 3)
	second, err := c.Lock(ctx, name, leasehold.LockOptions{TTL: 5 * time.Second, Holder: "second"})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Release(ctx)
	p = refusal(t, c, ctx, name)
	// Just granted: about the median past hold (300 ms) is left.
	if p.Holder != "second" || p.EstimatedWait < 100*time.Millisecond || p.EstimatedWait > time.Second {
		t.Fatalf("refused after three holds: holder %q, estimated wait %v (%s)", p.Holder, p.EstimatedWait, p.Extra["estimated_wait_ms"])
	}
	t.Logf("held for %v, estimated wait %v", p.HeldFor, p.EstimatedWait)
}

func TestFairWaiterToldItsPlace(t *testing.T) {
	c, ctx, name := newClient(t), testCtx(t), lockName(t)
	holdBriefly(t, c, ctx, name, leasehold.KindFair, 3)
	head, err := c.Lock(ctx, name, leasehold.LockOptions{Kind: leasehold.KindFair, TTL: 10 * time.Second, Holder: "head"})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var queued []leasehold.Queued
	got := make(chan *leasehold.Lease, 1)
	go func() {
		l, err := c.Lock(ctx, name, leasehold.LockOptions{Kind: leasehold.KindFair, Wait: 15 * time.Second,
			OnQueued: func(q leasehold.Queued) { mu.Lock(); queued = append(queued, q); mu.Unlock() }})
		if err != nil {
			t.Errorf("the waiter: %v", err)
		}
		got <- l
	}()
	// The first answer in line, then one per poll (the server cuts each to 1.5 s).
	waitFor(t, 10*time.Second, "two answers in line", func() bool { mu.Lock(); defer mu.Unlock(); return len(queued) >= 2 })
	mu.Lock()
	seen := append([]leasehold.Queued(nil), queued...)
	mu.Unlock()
	for _, q := range seen {
		if q.Position != 1 || q.HeldBy != "head" || q.HeldFor <= 0 {
			t.Fatalf("told %+v", q)
		}
	}
	// Told at once, behind a hold just granted: about the median past hold is left.
	if seen[0].EstimatedWait <= 0 || seen[0].EstimatedWait > time.Second || seen[1].HeldFor < seen[0].HeldFor {
		t.Fatalf("told %+v", seen)
	}
	if err := head.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-got:
		if l == nil || l.FencingToken() <= head.FencingToken() {
			t.Fatal("the waiter did not get the lock after the head")
		}
		_ = l.Release(ctx)
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was never granted")
	}
	t.Logf("told in line: %+v", seen)
}

func TestFairWaitRunningOutSaysWhoHolds(t *testing.T) {
	c, ctx, name := newClient(t), testCtx(t), lockName(t)
	head, err := c.Lock(ctx, name, leasehold.LockOptions{Kind: leasehold.KindFair, TTL: 10 * time.Second, Holder: "head"})
	if err != nil {
		t.Fatal(err)
	}
	defer head.Release(ctx)
	_, err = c.Lock(ctx, name, leasehold.LockOptions{Kind: leasehold.KindFair, Wait: 300 * time.Millisecond})
	var p *leasehold.Problem
	if !errors.As(err, &p) || p.Code != leasehold.CodeLockHeld || p.Holder != "head" || p.HeldFor <= 0 {
		t.Fatalf("want lock_held saying who holds, got %v (%+v)", err, p)
	}
}

func TestExpiringAtTheLeaseSlack(t *testing.T) {
	ctx, name := testCtx(t), lockName(t)
	u, _ := url.Parse(serverURL(t))
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1 // the watch stream
	rp.ErrorLog = log.New(io.Discard, "", 0)
	var blocked atomic.Bool
	var mu sync.Mutex
	var slacks []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/watch") {
			mu.Lock()
			slacks = append(slacks, r.URL.Query().Get("expiring_slack_ms"))
			mu.Unlock()
		}
		if blocked.Load() && strings.HasSuffix(r.URL.Path, "/heartbeat") {
			// As a paused or cut-off holder: its heartbeats no longer arrive.
			http.Error(w, "heartbeats stopped by the test", http.StatusBadGateway)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	defer srv.Close()
	c := leasehold.New(srv.URL, leasehold.WithExpiringSlack(500*time.Millisecond))
	watched := func() int { mu.Lock(); defer mu.Unlock(); return len(slacks) }

	other, err := c.Lock(ctx, name+"-client", leasehold.LockOptions{TTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the first watch", func() bool { return watched() == 1 })
	_ = other.Release(ctx)
	// The lock's own slack: 1.4 s of the 3 s TTL, told before the loss margin (1 s).
	l, err := c.Lock(ctx, name, leasehold.LockOptions{TTL: 3 * time.Second, ExpiringSlack: 1400 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())
	waitFor(t, 5*time.Second, "the second watch", func() bool { return watched() == 2 })
	time.Sleep(200 * time.Millisecond) // the watch is open on the server by now
	blocked.Store(true)
	stopped := time.Now()
	var expiring leasehold.Signal
	for expiring.Kind != leasehold.SignalExpiring {
		select {
		case expiring = <-l.Signals():
		case <-time.After(3 * time.Second):
			t.Fatal("no expiring signal")
		}
	}
	told := time.Since(stopped)
	// Told once 1.4 s were left (the default would be 1 s, the client's 0.5 s), at most 1.6 s
	// after the heartbeats stopped (the last one went out up to a third of the TTL before).
	if expiring.Remaining <= time.Second || expiring.Remaining > 1400*time.Millisecond || told > 1900*time.Millisecond {
		t.Fatalf("expiring with %v left, %v after the heartbeats stopped", expiring.Remaining, told)
	}
	mu.Lock()
	defer mu.Unlock()
	if slacks[0] != "500" {
		t.Fatalf("the client's slack was not asked: %q", slacks)
	}
	for _, s := range slacks[1:] {
		if s != "1400" {
			t.Fatalf("the lock's slack was not asked on every watch: %q", slacks)
		}
	}
}

func TestExpiringSlackMustBePositive(t *testing.T) {
	ctx, name := testCtx(t), lockName(t)
	bad := leasehold.New(serverURL(t), leasehold.WithExpiringSlack(-time.Second))
	if _, err := bad.Lock(ctx, name, leasehold.LockOptions{}); err == nil || !strings.Contains(err.Error(), "expiring slack") {
		t.Fatalf("a negative client slack: %v", err)
	}
	c := newClient(t)
	if _, err := c.Lock(ctx, name, leasehold.LockOptions{ExpiringSlack: -time.Millisecond}); err == nil ||
		!strings.Contains(err.Error(), "expiring slack") {
		t.Fatalf("a negative lock slack: %v", err)
	}
}
