package leasehold_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	leasehold "github.com/leasehold/leasehold/clients/go"
)

// One lease of each kind, read back: its state while held and after its release, the live
// names, and a multilease's members shown on their locks.
func TestInspectLeasesAndListLocks(t *testing.T) {
	ctx, name := testCtx(t), lockName(t)
	c := newClient(t)
	l, err := c.Lock(ctx, name, leasehold.LockOptions{TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.InspectLease(ctx, name, l.ID())
	if err != nil || info.State != "held" || info.Kind != "reentrant" || info.FencingToken != l.FencingToken() {
		t.Fatalf("InspectLease of a held lease: %+v, %v", info, err)
	}
	list, err := c.ListLocks(ctx, leasehold.ListOptions{Prefix: name})
	if err != nil || len(list.Locks) != 1 || list.Locks[0].Name != name || list.Locks[0].Holders != 1 {
		t.Fatalf("ListLocks: %+v, %v", list, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if info, err := c.InspectLease(ctx, name, l.ID()); err != nil || info.State != "released" || info.EndedAt == "" {
		t.Fatalf("InspectLease of a released lease: %+v, %v", info, err)
	}

	s, err := c.Semaphore(ctx, name+"-s", leasehold.SemaphoreOptions{Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(context.Background())
	if info, err := c.InspectSemaphoreLease(ctx, name+"-s", s.ID()); err != nil || info.State != "held" || info.Permits != 1 {
		t.Fatalf("InspectSemaphoreLease: %+v, %v", info, err)
	}

	m, err := c.Multilease(ctx, []leasehold.MultiLock{{Name: name + "-a"}, {Name: name + "-b"}}, leasehold.MultiOptions{TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	mi, err := c.InspectMultilease(ctx, m.ID())
	if err != nil || mi.State != "held" || len(mi.Members) != 2 || mi.Members[0].Lock != name+"-a" {
		t.Fatalf("InspectMultilease: %+v, %v", mi, err)
	}
	held := inspect(t, c, name+"-a")
	if len(held.Holders) != 1 || held.Holders[0].Multilease == nil || held.Holders[0].Multilease.LeaseID != m.ID() ||
		len(held.Holders[0].Multilease.Locks) != 2 || held.Holders[0].Multilease.HiddenLocks != 0 {
		t.Fatalf("a member's holder names its multilease: %+v", held.Holders)
	}
	if err := m.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if mi, err := c.InspectMultilease(ctx, m.ID()); err != nil || mi.State != "released" {
		t.Fatalf("InspectMultilease after the release: %+v, %v", mi, err)
	}
}

// A force release of a free lock in its lock-delay lifts the delay.
func TestForceReleaseLiftsALockDelay(t *testing.T) {
	ctx, name := testCtx(t), lockName(t)
	c, admin := newClient(t), adminClient(t)
	l, err := c.Lock(ctx, name, leasehold.LockOptions{TTL: 30 * time.Second, LockDelay: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	first, err := admin.ForceRelease(ctx, name, "go client test")
	if err != nil || !first.Released || len(first.Removed) != 1 || first.DelayLifted {
		t.Fatalf("the first force release removes the holder: %+v, %v", first, err)
	}
	select {
	case <-l.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("the holder was not told")
	}
	if info := inspect(t, c, name); info.Held || info.DelayedUntil == "" || info.LockDelayMs != 30000 {
		t.Fatalf("the lock is in its lock-delay: %+v", info)
	}
	second, err := admin.ForceRelease(ctx, name, "go client test")
	if err != nil || !second.Released || !second.DelayLifted || len(second.Removed) != 0 {
		t.Fatalf("the second force release lifts the delay: %+v, %v", second, err)
	}
	again, err := c.Lock(ctx, name, leasehold.LockOptions{})
	if err != nil {
		t.Fatalf("free again: %v", err)
	}
	_ = again.Release(ctx)
}

// A reader whose key may name only some of a multilease's locks sees the others counted.
func TestHiddenLocksOfAMultilease(t *testing.T) {
	ctx, name := testCtx(t), lockName(t)
	m, err := newClient(t).Multilease(ctx, []leasehold.MultiLock{{Name: name + "-pub"}, {Name: name + "-secret"}},
		leasehold.MultiOptions{TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Release(context.Background())
	reader := newClient(t, leasehold.WithAPIKey(createKey(t, map[string]interface{}{
		"name": name, "roles": []string{"reader"}, "patterns": []string{name + "-pub"},
	})))
	info, err := reader.InspectLock(ctx, name+"-pub")
	if err != nil || len(info.Holders) != 1 || info.Holders[0].Multilease == nil {
		t.Fatalf("InspectLock: %+v, %v", info, err)
	}
	if ms := info.Holders[0].Multilease; len(ms.Locks) != 1 || ms.Locks[0] != name+"-pub" || ms.HiddenLocks != 1 {
		t.Fatalf("the reader sees its lock and a count of the other: %+v", ms)
	}
	lease, err := reader.InspectLease(ctx, name+"-pub", m.Members()[0].LeaseID)
	if err != nil || lease.Multilease == nil || lease.Multilease.HiddenLocks != 1 {
		t.Fatalf("InspectLease: %+v, %v", lease, err)
	}
}

// createKey makes an API key with the admin token (spec: the body of POST /v1/admin/keys),
// revoked when the test ends; it returns the secret.
func createKey(t *testing.T, spec map[string]interface{}) string {
	t.Helper()
	body, _ := json.Marshal(spec)
	req, _ := http.NewRequest(http.MethodPost, serverURL(t)+"/v1/admin/keys", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+adminToken(t))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var made struct {
		Key    struct{ ID string } `json:"key"`
		Secret string              `json:"secret"`
	}
	err = json.NewDecoder(resp.Body).Decode(&made)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusCreated || made.Secret == "" {
		t.Fatalf("creating a key: %d, %v", resp.StatusCode, err)
	}
	t.Cleanup(func() {
		req, _ := http.NewRequest(http.MethodDelete, serverURL(t)+"/v1/admin/keys/"+made.Key.ID, nil)
		req.Header.Set("Authorization", "Bearer "+adminToken(t))
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	})
	return made.Secret
}
