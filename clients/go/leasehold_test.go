package leasehold_test

import (
	"context"
	"errors"
	"net/http"
	"sort"
	"sync"
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

func TestSemaphore(t *testing.T) {
	c, ctx, name := newClient(t), testCtx(t), lockName(t)
	s1, err := c.Semaphore(ctx, name, leasehold.SemaphoreOptions{Limit: 3, Permits: 2, TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	s2, err := c.Semaphore(ctx, name, leasehold.SemaphoreOptions{Limit: 3, TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if s1.Permits() != 2 || s2.Permits() != 1 || s1.Kind() != "semaphore" {
		t.Fatalf("permits %d and %d, kind %q", s1.Permits(), s2.Permits(), s1.Kind())
	}
	_, err = c.Semaphore(ctx, name, leasehold.SemaphoreOptions{Limit: 3})
	var p *leasehold.Problem
	if !errors.As(err, &p) || p.Code != leasehold.CodeNoPermits || !errors.Is(err, leasehold.ErrNoPermits) {
		t.Fatalf("full semaphore: want no_permits, got %v", err)
	}
	_, err = c.Semaphore(ctx, name, leasehold.SemaphoreOptions{Limit: 4})
	if !errors.As(err, &p) || p.Code != leasehold.CodeLimitMismatch || p.Limit != 3 {
		t.Fatalf("other limit: want limit_mismatch with limit 3, got %v (%+v)", err, p)
	}
	if _, err := s1.Reenter(ctx); err == nil {
		t.Fatal("a semaphore lease re-entered")
	}

	ch := make(chan result, 1)
	go func() {
		l, err := c.Semaphore(ctx, name, leasehold.SemaphoreOptions{Limit: 3, Permits: 2, Wait: 20 * time.Second})
		ch <- result{l, err, time.Now()}
	}()
	waitFor(t, 10*time.Second, "the waiting semaphore acquire", func() bool {
		si, err := c.InspectSemaphore(ctx, name)
		return err == nil && si.WaitingCount >= 1
	})
	if err := s1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := recv(t, ch, 10*time.Second, "the permits")
	if r.err != nil {
		t.Fatal(r.err)
	}
	si, err := c.InspectSemaphore(ctx, name)
	if err != nil || si.Used != 3 || si.Available != 0 || len(si.Holders) != 2 {
		t.Fatalf("semaphore after the handover: %+v, %v", si, err)
	}
	if err := s2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// An operator returns every permit: the holder's lease is told (its watch stream).
	if _, err := adminClient(t).ForceRelease(ctx, name, "test"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.lease.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("the semaphore lease was not told of the force release")
	}
	if !errors.Is(r.lease.Err(), leasehold.ErrLeaseLost) {
		t.Fatalf("Err: %v", r.lease.Err())
	}
	_ = r.lease.Release(ctx)
	if si, err := c.InspectSemaphore(ctx, name); err == nil && si.Used != 0 {
		t.Fatalf("permits still out: %+v", si)
	}
}

func TestReadWrite(t *testing.T) {
	c, ctx, name := newClient(t), testCtx(t), lockName(t)
	read := leasehold.LockOptions{Kind: leasehold.KindRead, TTL: 10 * time.Second}
	r1, err := c.Lock(ctx, name, read)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := c.Lock(ctx, name, read)
	if err != nil {
		t.Fatalf("readers must share: %v", err)
	}
	if _, err := c.Lock(ctx, name, leasehold.LockOptions{Kind: leasehold.KindWrite}); !errors.Is(err, leasehold.ErrLockHeld) {
		t.Fatalf("writer while read: want lock_held, got %v", err)
	}
	if _, err := r1.ReenterAs(ctx, leasehold.KindWrite); !isCode(err, leasehold.CodeUpgradeRefused) {
		t.Fatalf("upgrade: want upgrade_refused, got %v", err)
	}

	ch := make(chan result, 1)
	go func() {
		l, err := c.Lock(ctx, name, leasehold.LockOptions{Kind: leasehold.KindWrite, TTL: 10 * time.Second, Wait: 20 * time.Second})
		ch <- result{l, err, time.Now()}
	}()
	waitFor(t, 10*time.Second, "the writer waiting", func() bool { return inspect(t, c, name).WaitingCount >= 1 })
	if err := r1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-ch:
		t.Fatalf("the writer got in while a reader held: %+v", r)
	default:
	}
	if err := r2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w := recv(t, ch, 10*time.Second, "the writer's grant")
	if w.err != nil {
		t.Fatal(w.err)
	}
	if w.lease.Kind() != "write" {
		t.Fatalf("writer's kind %q", w.lease.Kind())
	}
	// Downgrade: the writer takes a read hold with its token, then gives up the write hold.
	if n, err := w.lease.ReenterAs(ctx, leasehold.KindRead); err != nil || n != 2 {
		t.Fatalf("downgrade: %d, %v", n, err)
	}
	if n, err := w.lease.ReleaseLevel(ctx, leasehold.KindWrite); err != nil || n != 1 {
		t.Fatalf("release the write hold: %d, %v", n, err)
	}
	r3, err := c.Lock(ctx, name, read)
	if err != nil {
		t.Fatalf("a reader after the downgrade: %v", err)
	}
	for _, l := range []*leasehold.Lease{r3, w.lease} {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func TestFairOrder(t *testing.T) {
	c, ct := countingClient(t)
	ctx, name := testCtx(t), lockName(t)
	fair := leasehold.LockOptions{Kind: leasehold.KindFair, TTL: 10 * time.Second}
	h, err := c.Lock(ctx, name, fair)
	if err != nil {
		t.Fatal(err)
	}
	const n = 3
	granted := make(chan int, n)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var tokens []int64
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			o := fair
			o.Wait = 30 * time.Second
			l, err := c.Lock(ctx, name, o)
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				granted <- -1
				return
			}
			mu.Lock()
			tokens = append(tokens, l.FencingToken())
			mu.Unlock()
			granted <- i
			if err := l.Release(ctx); err != nil {
				t.Errorf("waiter %d release: %v", i, err)
			}
		}(i)
		// Queue them one after the other.
		waitFor(t, 10*time.Second, "the waiter in the queue", func() bool { return inspect(t, c, name).QueueLength == i+1 })
	}
	// Every waiter gets a 202 ticket (Lock polls it).
	// and the server cuts each poll to its --max-wait-ms (1.5 s): wait for a second 202 each.
	waitFor(t, 10*time.Second, "two 202s for every waiter", func() bool { return ct.count(http.StatusAccepted) >= 2*n })
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var order []int
	for i := 0; i < n; i++ {
		select {
		case i := <-granted:
			order = append(order, i)
		case <-time.After(15 * time.Second):
			t.Fatalf("timed out waiting for grant %d (got %v)", i, order)
		}
	}
	wg.Wait()
	for i, got := range order {
		if got != i {
			t.Fatalf("fair order: got %v, want [0 1 2]", order)
		}
	}
	if !sort.SliceIsSorted(tokens, func(i, j int) bool { return tokens[i] < tokens[j] }) {
		t.Fatalf("fencing tokens out of order: %v", tokens)
	}
	t.Logf("fair order %v after %d 202 answers (tickets polled inside Lock)", order, ct.count(http.StatusAccepted))

	// A wait that runs out in the queue: lock_held, and the ticket leaves the queue.
	h2, err := c.Lock(ctx, name, fair)
	if err != nil {
		t.Fatal(err)
	}
	defer h2.Release(ctx)
	o := fair
	o.Wait = 300 * time.Millisecond
	if _, err := c.Lock(ctx, name, o); !errors.Is(err, leasehold.ErrLockHeld) {
		t.Fatalf("fair wait ran out: want lock_held, got %v", err)
	}
	if q := inspect(t, c, name).QueueLength; q != 0 {
		t.Fatalf("the ticket stayed in the queue: length %d", q)
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
