package leasehold_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	leasehold "github.com/leasehold/leasehold/clients/go"
)

// A RedLock lease says how many nodes granted it and how long it may be relied on, and every
// renewal says so again; the lock shows as redlock. clients/go/test.sh starts the server
// with three RedLock nodes of its own.
func TestRedlockLease(t *testing.T) {
	u := redlockURL(t)
	ctx, name := testCtx(t), lockName(t)
	c := leasehold.New(u)
	ttl := 1500 * time.Millisecond
	l, err := c.Lock(ctx, name, leasehold.LockOptions{TTL: ttl, Kind: leasehold.KindRedlock})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())
	if l.Kind() != "redlock" || l.NodesAcked() != 3 || l.Validity() <= 0 || l.Validity() >= ttl {
		t.Fatalf("the grant: kind %s, %d nodes, validity %v", l.Kind(), l.NodesAcked(), l.Validity())
	}
	if info := inspect(t, c, name); info.Kind != "redlock" || !info.Held {
		t.Fatalf("the lock shows as redlock: %+v", info)
	}
	// Past its TTL it holds by its renewals (every 500 ms), whose answers replaced the grant's.
	time.Sleep(2 * ttl)
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
	if l.NodesAcked() != 3 || l.Validity() <= 0 || l.Validity() >= ttl {
		t.Fatalf("after renewals: %d nodes, validity %v", l.NodesAcked(), l.Validity())
	}
}

// redlockURL is the server with RedLock nodes that clients/go/test.sh starts (it shares the
// other server's admin token); without it the test skips, saying so.
func redlockURL(t *testing.T) string {
	t.Helper()
	u := os.Getenv("LEASEHOLD_TEST_REDLOCK_URL")
	if u == "" {
		t.Skip("LEASEHOLD_TEST_REDLOCK_URL is not set: run clients/go/test.sh, which starts a server with RedLock nodes")
	}
	return u
}

// A RedLock lease's holder hears the signals any lease's does (clients/parity.json
// redlockSignals): contended while a RedLock request waits for the name, then an operator's
// revocation, ignored here, which gives the lease up as lost (revoked) a margin before the
// deadline, as TestRevocationIgnored checks of a main-Redis lease.
func TestRedlockHolderHearsContendedAndRevocation(t *testing.T) {
	u := redlockURL(t)
	ct := &countingTransport{base: http.DefaultTransport.(*http.Transport).Clone()}
	c := leasehold.New(u, leasehold.WithHTTPClient(&http.Client{Transport: ct}))
	other, admin := leasehold.New(u), leasehold.New(u, leasehold.WithAPIKey(adminToken(t)))
	ctx, name := testCtx(t), lockName(t)
	ttl := 10 * time.Second // margin: a sixth, 1.67 s
	lease, err := c.Lock(ctx, name, leasehold.LockOptions{TTL: ttl, Kind: leasehold.KindRedlock})
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.Background())
	waitFor(t, 5*time.Second, "the watch open", func() bool { return ct.watchesOpen() >= 1 })

	// A RedLock request waits 3 s (the server cuts each wait to 1.5 s: the client asks again),
	// then gives up: the lease is not released before the revocation.
	ch := make(chan result, 1)
	go func() {
		l, err := other.Lock(ctx, name, leasehold.LockOptions{TTL: ttl, Kind: leasehold.KindRedlock, Wait: 3 * time.Second})
		ch <- result{l, err, time.Now()}
	}()
	s := nextSignal(t, lease.Signals(), leasehold.SignalContended, 5*time.Second)
	if s.Waiters < 1 || s.Lock != name || s.ID == "" {
		t.Fatalf("contended: %+v", s)
	}
	if r := recv(t, ch, 10*time.Second, "the waiter's end"); !errors.Is(r.err, leasehold.ErrLockHeld) {
		if r.lease != nil {
			_ = r.lease.Release(ctx)
		}
		t.Fatalf("the waiter of a held RedLock lock: %v", r.err)
	}

	res, err := admin.Revoke(ctx, name, 3*time.Second, leasehold.RevokeReason("rotate the nodes"))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Leases) != 1 || res.Leases[0].LeaseID != lease.ID() {
		t.Fatalf("revoke answered %+v", res)
	}
	deadline := res.Leases[0].Revocation.Deadline
	s = nextSignal(t, lease.Signals(), leasehold.SignalRevocationRequested, 3*time.Second)
	if s.Revocation == nil || s.Revocation.Reason != "rotate the nodes" || !s.Revocation.Deadline.Equal(deadline) {
		t.Fatalf("revocation signal: %+v (revocation %+v)", s, s.Revocation)
	}
	assertGivenUpAsRevoked(t, lease, "rotate the nodes", deadline)
	// Here the lock is given back on the RedLock nodes.
	releaseGivenUp(t, c, ctx, lease, name)
}

// What the copies behind a lease said reaches it from the grant and from every heartbeat:
// degraded (a shard without a replica, a heartbeat the replicas did not acknowledge), and for
// a multilease its weakest member's. A stand-in server answers, as only Sentinel and Cluster
// deployments degrade.
func TestDegradedGrantsAndRenewals(t *testing.T) {
	var beats int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/v1/locks/d/leases":
			w.WriteHeader(http.StatusCreated)
			fmt.Fprint(w, `{"lease_id":"l1","token":"lht_t","lock":"d","kind":"reentrant","fencing_token":1,`+
				`"reentry_count":1,"ttl_ms":900,"expires_at":"2030-01-01T00:00:00Z","replicas_acked":0,"degraded":"no_replica"}`)
		case r.Method == http.MethodPost && r.URL.Path == "/v1/multileases":
			w.WriteHeader(http.StatusCreated)
			fmt.Fprint(w, `{"lease_id":"m1","token":"lht_m","holder":null,"ttl_ms":900,"expires_at":"2030-01-01T00:00:00Z",`+
				`"members":[{"lock":"a","kind":"reentrant","lease_id":"a1","fencing_token":3,"replicas_acked":2},`+
				`{"lock":"b","kind":"reentrant","lease_id":"b1","fencing_token":4,"replicas_acked":1,"degraded":"not_replicated"}]}`)
		case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/heartbeat"):
			atomic.AddInt32(&beats, 1)
			fmt.Fprint(w, `{"lease_id":"l1","lock":"d","fencing_token":1,"reentry_count":1,"ttl_ms":900,`+
				`"expires_at":"2030-01-01T00:00:00Z","replicas_acked":1,"degraded":"not_replicated"}`)
		case r.Method == http.MethodDelete:
			fmt.Fprint(w, `{"lease_id":"l1","lock":"d","released":true,"reentry_count":0,"locks":[]}`)
		default: // the watch: a server without one, so the heartbeats alone keep the lease
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"type":"/problems/not_found","title":"No such resource","status":404,"detail":"","code":"not_found"}`)
		}
	}))
	defer srv.Close()
	ctx := testCtx(t)
	c := leasehold.New(srv.URL)
	l, err := c.Lock(ctx, "d", leasehold.LockOptions{TTL: 900 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if l.Degraded() != leasehold.DegradedNoReplica || l.ReplicasAcked() != 0 {
		t.Fatalf("the grant: %q, %d replicas", l.Degraded(), l.ReplicasAcked())
	}
	waitFor(t, 3*time.Second, "a heartbeat's answer", func() bool {
		return atomic.LoadInt32(&beats) > 0 && l.Degraded() == leasehold.DegradedNotReplicated
	})
	if l.ReplicasAcked() != 1 {
		t.Fatalf("the renewal: %d replicas", l.ReplicasAcked())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	m, err := c.Multilease(ctx, []leasehold.MultiLock{{Name: "a"}, {Name: "b"}}, leasehold.MultiOptions{TTL: 900 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Release(ctx)
	if m.ReplicasAcked() != 1 || m.Degraded() != leasehold.DegradedNotReplicated || m.Members()[1].Degraded != leasehold.DegradedNotReplicated {
		t.Fatalf("a multilease's weakest member's: %d replicas, %q", m.ReplicasAcked(), m.Degraded())
	}
}
