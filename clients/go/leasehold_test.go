package leasehold_test

import (
	"context"
	"errors"
	"net/http"
	"sort"
	"testing"
	"time"

	leasehold "github.com/leasehold/leasehold/clients/go"
)

func TestAcquireWaitRelease(t *testing.T) {
	c, ctx, name := newClient(t), testCtx(t), lockName(t)

	a, err := c.Lock(ctx, name, leasehold.LockOptions{TTL: 10 * time.Second, Holder: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if a.FencingToken() <= 0 || a.ID() == "" || a.Kind() != "reentrant" || a.TTL() != 10*time.Second {
		t.Fatalf("odd lease: token %d id %q kind %q ttl %v", a.FencingToken(), a.ID(), a.Kind(), a.TTL())
	}

	// Held: without a wait, refused at once.
	if _, err := c.Lock(ctx, name, leasehold.LockOptions{Holder: "b"}); !errors.Is(err, leasehold.ErrLockHeld) {
		t.Fatalf("second Lock without a wait: want lock_held, got %v", err)
	}

	// With a wait: granted when a releases.
	ch := make(chan result, 1)
	go func() {
		l, err := c.Lock(ctx, name, leasehold.LockOptions{TTL: 10 * time.Second, Wait: 20 * time.Second, Holder: "b"})
		ch <- result{l, err, time.Now()}
	}()
	waitFor(t, 10*time.Second, "b waiting on the server", func() bool { return inspect(t, c, name).WaitingCount >= 1 })
	if err := a.Release(ctx); err != nil {
		t.Fatalf("release a: %v", err)
	}
	if a.Context().Err() == nil || a.Err() != nil {
		t.Fatalf("after Release: context %v (want cancelled), Err %v (want nil)", a.Context().Err(), a.Err())
	}
	r := recv(t, ch, 10*time.Second, "b's grant")
	if r.err != nil {
		t.Fatalf("b: %v", r.err)
	}
	if r.lease.FencingToken() <= a.FencingToken() {
		t.Fatalf("fencing token did not grow: %d then %d", a.FencingToken(), r.lease.FencingToken())
	}
	info := inspect(t, c, name)
	if !info.Held || len(info.Holders) != 1 || info.Holders[0].LeaseID != r.lease.ID() || info.Holders[0].Holder != "b" {
		t.Fatalf("holders after the handover: %+v", info)
	}
	if err := r.lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.lease.Release(ctx); err != nil {
		t.Fatalf("a second Release should do nothing, got %v", err)
	}
	if info := inspect(t, c, name); info.Held {
		t.Fatalf("still held after release: %+v", info)
	}
}

// The server cuts waits to its --max-wait-ms (test.sh: 1500): Lock waits on for the rest.
func TestWaitLongerThanServerMax(t *testing.T) {
	c, ctx, name := newClient(t), testCtx(t), lockName(t)
	a, err := c.Lock(ctx, name, leasehold.LockOptions{TTL: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release(ctx)
	start := time.Now()
	_, err = c.Lock(ctx, name, leasehold.LockOptions{Wait: 2500 * time.Millisecond})
	waited := time.Since(start)
	var p *leasehold.Problem
	if !errors.As(err, &p) || p.Code != leasehold.CodeLockHeld {
		t.Fatalf("want lock_held, got %v", err)
	}
	if waited < 2500*time.Millisecond || waited > 6*time.Second {
		t.Fatalf("waited %v for a 2.5 s wait (server max 1.5 s)", waited)
	}
	t.Logf("a 2.5 s wait on a server that allows 1.5 s per request lasted %v", waited.Round(time.Millisecond))
}

func TestReentry(t *testing.T) {
	c, ctx, name := newClient(t), testCtx(t), lockName(t)
	l, err := c.Lock(ctx, name, leasehold.LockOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	n, err := l.Reenter(ctx)
	if err != nil || n != 2 || l.ReentryCount() != 2 {
		t.Fatalf("Reenter: %d, %v", n, err)
	}
	info := inspect(t, c, name)
	if len(info.Holders) != 1 || info.Holders[0].ReentryCount != 2 || info.Holders[0].FencingToken != l.FencingToken() {
		t.Fatalf("after reentry: %+v", info)
	}
	if n, err := l.ReleaseLevel(ctx, ""); err != nil || n != 1 {
		t.Fatalf("ReleaseLevel: %d, %v", n, err)
	}
	if info := inspect(t, c, name); !info.Held || l.Context().Err() != nil {
		t.Fatalf("one level left, but held=%v ctx=%v", info.Held, l.Context().Err())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if info := inspect(t, c, name); info.Held {
		t.Fatalf("Release left levels: %+v", info)
	}

	// Exclusive locks refuse a second entry, typed.
	x, err := c.Lock(ctx, name+"-x", leasehold.LockOptions{Kind: leasehold.KindExclusive})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Release(ctx)
	_, err = x.Reenter(ctx)
	var p *leasehold.Problem
	if !errors.As(err, &p) || p.Code != leasehold.CodeNotReentrant || p.Status != http.StatusConflict {
		t.Fatalf("exclusive reentry: want 409 not_reentrant, got %v", err)
	}
	if x.Err() != nil || x.Context().Err() != nil {
		t.Fatal("a refused reentry must not end the lease")
	}
}

func TestFenceCheck(t *testing.T) {
	c, ctx, name := newClient(t), testCtx(t), lockName(t)
	l, err := c.Lock(ctx, name, leasehold.LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := c.CheckFence(ctx, name, l.FencingToken())
	if err != nil || !f.Current || f.FencingCounter != l.FencingToken() {
		t.Fatalf("check of the holder's token: %+v, %v", f, err)
	}
	if f, err := c.CheckFence(ctx, name, l.FencingToken()-1); err != nil || f.Current {
		t.Fatalf("an older token: %+v, %v", f, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if f, err := c.CheckFence(ctx, name, l.FencingToken()); err != nil || f.Current {
		t.Fatalf("after release: %+v, %v", f, err)
	}
}

// lossLatency takes a lease, force-releases it as an operator would, and measures how long
// after the force release's answer the lease's context was cancelled.
func lossLatency(t *testing.T, watch bool, ttl time.Duration) (fromAnswer, fromSend time.Duration) {
	t.Helper()
	var opts []leasehold.Option
	if !watch {
		opts = append(opts, leasehold.WithoutWatch())
	}
	c, ct := countingClient(t, opts...)
	ctx, name := testCtx(t), lockName(t)
	l, err := c.Lock(ctx, name, leasehold.LockOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	if watch {
		// Measure the watch stream's path: force-release once it is open (a loss before it
		// opens is told too: the watch answers 410 then).
		waitFor(t, 5*time.Second, "the watch stream open", func() bool { return ct.watchesOpen() == 1 })
	}
	told := make(chan time.Time, 1)
	go func() {
		<-l.Context().Done() // the work's context
		told <- time.Now()
	}()
	sent := time.Now()
	res, err := adminClient(t).ForceRelease(ctx, name, "go client test")
	answered := time.Now()
	if err != nil || !res.Released || len(res.Removed) != 1 || res.Removed[0].LeaseID != l.ID() {
		t.Fatalf("force release: %+v, %v", res, err)
	}
	var at time.Time
	select {
	case at = <-told:
	case <-time.After(ttl):
		t.Fatalf("the loss was not told within the TTL (%v)", ttl)
	}
	var lost *leasehold.LostError
	if err := l.Err(); !errors.As(err, &lost) || lost.Reason != "force_released" || !errors.Is(err, leasehold.ErrLeaseLost) {
		t.Fatalf("Err after a force release: %v", err)
	}
	select {
	case <-l.Lost():
	default:
		t.Fatal("Lost() not closed")
	}
	if err := l.Release(ctx); !errors.Is(err, leasehold.ErrLeaseLost) {
		t.Fatalf("Release of a lost lease should return the loss, got %v", err)
	}
	return at.Sub(answered), at.Sub(sent)
}

func TestLossAfterForceRelease(t *testing.T) {
	var answers, sends []time.Duration
	for i := 0; i < 5; i++ {
		fromAnswer, fromSend := lossLatency(t, true, 30*time.Second)
		t.Logf("loss latency (watch stream): %v after the force release's answer (%v after it was sent)",
			fromAnswer.Round(time.Microsecond), fromSend.Round(time.Microsecond))
		answers, sends = append(answers, fromAnswer), append(sends, fromSend)
	}
	sort.Slice(answers, func(i, j int) bool { return answers[i] < answers[j] })
	sort.Slice(sends, func(i, j int) bool { return sends[i] < sends[j] })
	if answers[4] > time.Second {
		t.Fatalf("the watch stream told the loss %v after the force release", answers[4])
	}
	t.Logf("LOSS LATENCY (watch stream, 5 force releases): %v to %v after the force release's answer "+
		"(negative: the work was told before the answer reached the caller); %v to %v (median %v) after it was sent",
		answers[0].Round(time.Microsecond), answers[4].Round(time.Microsecond),
		sends[0].Round(time.Microsecond), sends[4].Round(time.Microsecond), sends[2].Round(time.Microsecond))
}

// Without the watch stream, the heartbeat's 410 tells the loss within TTL/3.
func TestLossByHeartbeatWithoutWatch(t *testing.T) {
	ttl := 3 * time.Second
	fromAnswer, _ := lossLatency(t, false, ttl)
	t.Logf("LOSS LATENCY (heartbeat 410 only, TTL %v, heartbeat every %v): %v", ttl, ttl/3, fromAnswer.Round(time.Millisecond))
	if fromAnswer > ttl/3+500*time.Millisecond {
		t.Fatalf("loss told %v after the force release: more than one heartbeat interval (%v)", fromAnswer, ttl/3)
	}
}

func TestHeartbeatKeepsLeaseAlive(t *testing.T) {
	c, ctx, name := newClient(t), testCtx(t), lockName(t)
	// 2 s, not less: on a loaded machine the embedded Redis (fsync on every write) has been
	// seen to stall for a second, and a lease that cannot be renewed is rightly given up.
	ttl := 2 * time.Second
	l, err := c.Lock(ctx, name, leasehold.LockOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for time.Since(start) < 3*ttl+ttl/2 {
		// Every half TTL: still ours, and refused to others.
		time.Sleep(ttl / 2)
		if l.Err() != nil || l.Context().Err() != nil {
			t.Fatalf("lost after %v: %v", time.Since(start), l.Err())
		}
		if _, err := c.Lock(ctx, name, leasehold.LockOptions{}); !errors.Is(err, leasehold.ErrLockHeld) {
			t.Fatalf("after %v another acquire got %v, want lock_held", time.Since(start), err)
		}
	}
	info := inspect(t, c, name)
	if !info.Held || info.Holders[0].LeaseID != l.ID() {
		t.Fatalf("after %v (3.5 TTLs) the lock is %+v", time.Since(start), info)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("release after 3.5 TTLs: %v", err)
	}
	t.Logf("a %v lease held for %v by heartbeats", ttl, time.Since(start).Round(time.Millisecond))
}

func TestReleaseAfterCancel(t *testing.T) {
	c, name := newClient(t), lockName(t)
	ctx, cancel := context.WithCancel(context.Background())
	l, err := c.Lock(ctx, name, leasehold.LockOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	<-l.Context().Done() // derived from ctx
	if l.Err() != nil {
		t.Fatalf("a cancelled ctx is no loss: %v", l.Err())
	}
	if !inspect(t, c, name).Held {
		t.Fatal("the lease must stay held (renewed) until Release")
	}
	// The deferred Release of a cancelled function still releases.
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release with a cancelled ctx: %v", err)
	}
	if inspect(t, c, name).Held {
		t.Fatal("still held")
	}
}

func TestWithLock(t *testing.T) {
	c, ctx, name := newClient(t), testCtx(t), lockName(t)

	// A panic in the critical section releases the lock, and the panic goes on.
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Fatalf("recovered %v", r)
			}
		}()
		_ = c.WithLock(ctx, name, leasehold.LockOptions{}, func(ctx context.Context, l *leasehold.Lease) error {
			panic("boom")
		})
	}()
	if inspect(t, c, name).Held {
		t.Fatal("a panic left the lock held")
	}

	// Lost in the middle: the work's ctx is cancelled and WithLock returns the loss.
	admin := adminClient(t)
	err := c.WithLock(ctx, name, leasehold.LockOptions{TTL: 10 * time.Second}, func(ctx context.Context, l *leasehold.Lease) error {
		if _, err := admin.ForceRelease(context.Background(), name, "test"); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Second):
			return errors.New("not told of the loss")
		}
	})
	var lost *leasehold.LostError
	if !errors.As(err, &lost) || lost.Reason != "force_released" {
		t.Fatalf("WithLock after a force release: %v", err)
	}

	// The work's result passes through.
	mine := errors.New("mine")
	if err := c.WithLock(ctx, name, leasehold.LockOptions{}, func(context.Context, *leasehold.Lease) error { return mine }); err != mine {
		t.Fatalf("WithLock returned %v", err)
	}
	if inspect(t, c, name).Held {
		t.Fatal("WithLock left the lock held")
	}
}
