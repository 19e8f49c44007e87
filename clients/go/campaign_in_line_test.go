package leasehold_test

import (
	"context"
	"sync"
	"testing"
	"time"

	leasehold "github.com/leasehold/leasehold/clients/go"
)

// A waiter in line hears where it stands (clients/PROTOCOL.md, "Why the wait"): a campaign's
// CampaignOnInLine as a fair lock's OnQueued; a hook that panics leaves the line first.

// heard collects what a hook is told, safe for the campaign's goroutine and the test's.
type heard struct {
	mu   sync.Mutex
	told []leasehold.InLine
}

func (h *heard) hook(in leasehold.InLine) { h.mu.Lock(); h.told = append(h.told, in); h.mu.Unlock() }

func (h *heard) all() []leasehold.InLine {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]leasehold.InLine(nil), h.told...)
}

// clients/parity.json campaignInLine: B waits behind A and hears position 1 and A's holder,
// value and term; A resigns, B leads, and the hook heard nothing after the grant.
func TestCampaignInLineTellsWhereItStands(t *testing.T) {
	ctx, c, name := testCtx(t), newClient(t), lockName(t)
	a, err := c.Campaign(ctx, name, leasehold.CampaignValue("a"), leasehold.CampaignHolder("node-a"),
		leasehold.CampaignTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Resign(ctx)
	var h heard
	done := make(chan result, 1)
	var b *leasehold.Term
	go func() {
		term, err := c.Campaign(ctx, name, leasehold.CampaignValue("b"), leasehold.CampaignHolder("node-b"),
			leasehold.CampaignTTL(3*time.Second), leasehold.CampaignWait(20*time.Second), leasehold.CampaignOnInLine(h.hook))
		b = term
		done <- result{err: err, at: time.Now()}
	}()
	waitFor(t, 10*time.Second, "B hears its place", func() bool { return len(h.all()) > 0 })
	first := h.all()[0]
	if first.Position != 1 || first.Leader == nil || first.HasEstimate {
		t.Fatalf("told %+v", first)
	}
	if l := first.Leader; l.Holder != "node-a" || l.Value != "a" || l.Term != a.Number() {
		t.Fatalf("told the leader %+v (A's term %d)", l, a.Number())
	}
	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	r := recv(t, done, 10*time.Second, "B's campaign")
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer b.Resign(ctx)
	told := len(h.all())
	time.Sleep(1500 * time.Millisecond) // longer than a poll: none comes after the grant
	if len(h.all()) != told || b.Number() <= a.Number() {
		t.Fatalf("told %d answers, then %d after the grant; B's term %d after A's %d", told, len(h.all()), b.Number(), a.Number())
	}
	t.Logf("told in line: %+v", h.all())
}

// expectHookPanic runs call, whose hook panics with "the hook fails", in a goroutine of its
// own, and waits up to 10 s for that panic to come up through it (after the call left its line).
func expectHookPanic(t *testing.T, what string, call func()) {
	t.Helper()
	panicked := make(chan interface{}, 1)
	go func() {
		defer func() { panicked <- recover() }()
		call()
	}()
	select {
	case p := <-panicked:
		if p != "the hook fails" {
			t.Fatalf("%s: recovered %v", what, p)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s never panicked", what)
	}
}

func TestCampaignInLineHookPanicLeavesTheLine(t *testing.T) {
	ctx, c, name := testCtx(t), newClient(t), lockName(t)
	a, err := c.Campaign(ctx, name, leasehold.CampaignValue("a"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Resign(ctx)
	expectHookPanic(t, "the campaign's hook", func() {
		_, _ = c.Campaign(ctx, name, leasehold.CampaignValue("b"), leasehold.CampaignWait(10*time.Second),
			leasehold.CampaignOnInLine(func(leasehold.InLine) { panic("the hook fails") }))
	})
	if e, err := c.Leader(ctx, name); err != nil || len(e.Candidates) != 0 {
		t.Fatalf("the line after the hook's panic: %+v, %v", e, err)
	}
}

func TestFairOnQueuedPanicLeavesTheQueue(t *testing.T) {
	ctx, c, name := testCtx(t), newClient(t), lockName(t)
	head, err := c.Lock(ctx, name, leasehold.LockOptions{Kind: leasehold.KindFair, TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer head.Release(context.Background())
	expectHookPanic(t, "the fair lock's hook", func() {
		_, _ = c.Lock(ctx, name, leasehold.LockOptions{Kind: leasehold.KindFair, Wait: 10 * time.Second,
			OnQueued: func(leasehold.Queued) { panic("the hook fails") }})
	})
	if info := inspect(t, c, name); info.QueueLength != 0 {
		t.Fatalf("the queue after the hook's panic: %+v", info)
	}
}
