package leasehold_test

import (
	"context"
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
	u := os.Getenv("LEASEHOLD_TEST_REDLOCK_URL")
	if u == "" {
		t.Skip("LEASEHOLD_TEST_REDLOCK_URL is not set: run clients/go/test.sh, which starts a server with RedLock nodes")
	}
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
