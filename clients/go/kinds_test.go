// The other kinds of lease against the server: semaphores, read/write locks, fair order.
package leasehold_test

import (
	"errors"
	"net/http"
	"sort"
	"sync"
	"testing"
	"time"

	leasehold "github.com/leasehold/leasehold/clients/go"
)

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
