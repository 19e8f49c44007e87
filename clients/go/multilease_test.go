package leasehold_test

import (
	"context"
	"errors"
	"testing"
	"time"

	leasehold "github.com/leasehold/leasehold/clients/go"
)

// All or nothing: with one lock held by someone else, a multilease takes neither, and says
// which lock was refused; once it is free, one lease holds both, a fencing token each.
func TestMultileaseAllOrNothing(t *testing.T) {
	c, ctx := newClient(t), testCtx(t)
	a, b := lockName(t)+"-a", lockName(t)+"-b"
	other, err := c.Lock(ctx, b, leasehold.LockOptions{TTL: 20 * time.Second, Holder: "other", Kind: leasehold.KindWrite})
	if err != nil {
		t.Fatal(err)
	}
	locks := []leasehold.MultiLock{{Name: a}, {Name: b, Kind: leasehold.KindWrite}}
	_, err = c.Multilease(ctx, locks, leasehold.MultiOptions{TTL: 20 * time.Second})
	var p *leasehold.Problem
	if !errors.As(err, &p) || p.Code != leasehold.CodeLockHeld || len(p.Members) != 1 ||
		p.Members[0].Lock != b || p.Members[0].Holder != "other" {
		t.Fatalf("want lock_held naming %s, got %v (%+v)", b, err, p)
	}
	if inspect(t, c, a).Held {
		t.Fatalf("%s is held after a refused multilease", a)
	}
	if err := other.Release(ctx); err != nil {
		t.Fatal(err)
	}
	m, err := c.Multilease(ctx, locks, leasehold.MultiOptions{TTL: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	members := m.Members()
	if len(members) != 2 || members[0].Lock != a || members[1].Kind != "write" || m.Kind() != "multilease" {
		t.Fatalf("members: %+v (kind %s)", members, m.Kind())
	}
	for _, member := range members {
		info := inspect(t, c, member.Lock)
		if member.FencingToken <= 0 || len(info.Holders) != 1 || info.Holders[0].LeaseID != member.LeaseID ||
			info.Holders[0].FencingToken != member.FencingToken {
			t.Fatalf("member %+v, lock %+v", member, info)
		}
	}
	if err := m.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{a, b} {
		if inspect(t, c, name).Held {
			t.Fatalf("%s still held after the multilease's release", name)
		}
	}
}

// The loss of one member is the loss of the whole: the lease's context is cancelled, Err
// names the member, Release gives the other locks back at once; and the lock-delay the
// multilease asked for keeps the lost member's lock from the next holder.
func TestMultileaseMemberLostIsLeaseLost(t *testing.T) {
	c, admin, ctx := newClient(t), adminClient(t), testCtx(t)
	a, b := lockName(t)+"-a", lockName(t)+"-b"
	m, err := c.Multilease(ctx, []leasehold.MultiLock{{Name: a}, {Name: b}},
		leasehold.MultiOptions{TTL: 30 * time.Second, LockDelay: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.ForceRelease(ctx, b, "test"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-m.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("the multilease was not lost within 10 s of its member's force release")
	}
	if m.Context().Err() == nil {
		t.Fatal("the lease's context is not cancelled")
	}
	var lost *leasehold.LostError
	if !errors.As(m.Err(), &lost) || lost.Member != b || lost.Reason != "force_released" {
		t.Fatalf("want a LostError naming %s, got %#v", b, m.Err())
	}
	if err := m.Release(ctx); !errors.Is(err, leasehold.ErrLeaseLost) {
		t.Fatalf("Release of a lost multilease: %v", err)
	}
	if inspect(t, c, a).Held {
		t.Fatalf("%s still held after the lost multilease's release", a)
	}
	_, err = c.Lock(ctx, b, leasehold.LockOptions{})
	var p *leasehold.Problem
	if !errors.Is(err, leasehold.ErrLockDelay) || !errors.As(err, &p) || p.DelayedUntil == "" || p.RetryAfter <= 0 {
		t.Fatalf("want lock_delay on %s, got %v", b, err)
	}
}

// A lease that ends other than by a release keeps its lock from the next holder for its
// lock-delay (409 lock_delay); a waiter waits through it; a release frees the lock at once.
func TestLockDelay(t *testing.T) {
	c, admin, ctx, name := newClient(t), adminClient(t), testCtx(t), lockName(t)
	delay := 1500 * time.Millisecond
	l, err := c.Lock(ctx, name, leasehold.LockOptions{TTL: 20 * time.Second, LockDelay: delay})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.ForceRelease(ctx, name, "test"); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	<-l.Lost()
	_, err = c.Lock(ctx, name, leasehold.LockOptions{})
	var p *leasehold.Problem
	if !errors.As(err, &p) || p.Code != leasehold.CodeLockDelay || p.Status != 409 || p.DelayedUntil == "" {
		t.Fatalf("want 409 lock_delay, got %v", err)
	}
	// A wait longer than the delay (and than the server's 1.5 s --max-wait-ms, which the
	// client continues) is granted once the delay is over, not before.
	next, err := c.Lock(ctx, name, leasehold.LockOptions{Wait: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(freed); waited < delay-100*time.Millisecond {
		t.Fatalf("granted %v after the force release, within its %v lock-delay", waited, delay)
	}
	_ = l.Release(ctx)
	// A release ends the lease voluntarily: no delay.
	if err := next.Release(ctx); err != nil {
		t.Fatal(err)
	}
	again, err := c.Lock(ctx, name, leasehold.LockOptions{})
	if err != nil {
		t.Fatalf("a released lease's lock-delay held the lock: %v", err)
	}
	_ = again.Release(context.Background())
}
