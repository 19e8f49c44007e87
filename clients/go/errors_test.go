package leasehold_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	leasehold "github.com/leasehold/leasehold/clients/go"
)

// The three documented ways to find a *Problem, on a wrapped error, without a server.
func TestProblemErrorsAs(t *testing.T) {
	var err error = &leasehold.Problem{Status: 409, Code: leasehold.CodeLockHeld, Holder: "h"}
	err = fmt.Errorf("deploy: %w", err)

	var pp *leasehold.Problem
	if !errors.As(err, &pp) || pp.Code != leasehold.CodeLockHeld || pp.Holder != "h" {
		t.Fatalf("errors.As into *Problem: %v", pp)
	}
	var pv leasehold.Problem
	if !errors.As(err, &pv) || pv.Code != leasehold.CodeLockHeld || pv.Status != 409 {
		t.Fatalf("errors.As into Problem: %+v", pv)
	}
	if !errors.As(err, &leasehold.Problem{}) {
		t.Fatal("errors.As(err, &leasehold.Problem{})")
	}
	if !errors.Is(err, leasehold.ErrLockHeld) || errors.Is(err, leasehold.ErrNoPermits) {
		t.Fatal("errors.Is by code")
	}
	if errors.As(errors.New("other"), &pp) {
		t.Fatal("a plain error is no Problem")
	}
	lost := &leasehold.LostError{Reason: "expired", Problem: &leasehold.Problem{Status: 410, Code: leasehold.CodeLeaseLost}}
	if !errors.Is(lost, leasehold.ErrLeaseLost) || !errors.As(lost, &pp) || pp.Status != 410 {
		t.Fatal("LostError: Is ErrLeaseLost, As its Problem")
	}
}

func TestErrorsTyped(t *testing.T) {
	c, ctx, name := newClient(t), testCtx(t), lockName(t)
	h, err := c.Lock(ctx, name, leasehold.LockOptions{TTL: 20 * time.Second, Holder: "typed-holder"})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(ctx)

	_, err = c.Lock(ctx, name, leasehold.LockOptions{Wait: 100 * time.Millisecond})
	var p *leasehold.Problem
	if !errors.As(err, &p) {
		t.Fatalf("not a *Problem: %T %v", err, err)
	}
	if p.Code != leasehold.CodeLockHeld || p.Status != 409 || p.Type != "/problems/lock_held" || p.Title == "" ||
		p.Detail == "" || p.Holder != "typed-holder" || p.LeaseID != h.ID() || p.HolderID == "" ||
		p.RetryAfter <= 0 || p.RetryAfter > 20*time.Second || p.Wait != 100*time.Millisecond {
		t.Fatalf("lock_held problem: %+v", p)
	}
	var pv leasehold.Problem
	if !errors.As(err, &pv) || pv.Code != leasehold.CodeLockHeld || !errors.As(err, &leasehold.Problem{}) || !errors.Is(err, leasehold.ErrLockHeld) {
		t.Fatalf("value form: %+v", pv)
	}
	if string(p.Extra["holder"]) != `"typed-holder"` {
		t.Fatalf("Extra: %s", p.Extra)
	}

	cases := []struct {
		what   string
		err    func() error
		status int
		code   string
		check  func(p *leasehold.Problem) bool
	}{
		{"another kind", func() error {
			_, err := c.Lock(ctx, name, leasehold.LockOptions{Kind: leasehold.KindRead})
			return err
		}, 409, leasehold.CodeKindConflict, func(p *leasehold.Problem) bool { return p.HeldAs == "reentrant" }},
		{"a bad name", func() error {
			_, err := c.Lock(ctx, "no spaces allowed", leasehold.LockOptions{})
			return err
		}, 422, leasehold.CodeInvalidLockName, nil},
		{"a TTL under the minimum", func() error {
			_, err := c.Lock(ctx, name+"-ttl", leasehold.LockOptions{TTL: time.Millisecond})
			return err
		}, 422, leasehold.CodeInvalidTTL, nil},
		{"an unknown API key", func() error {
			_, err := newClient(t, leasehold.WithAPIKey("lhk_not-a-key")).Lock(ctx, name+"-key", leasehold.LockOptions{})
			return err
		}, 401, leasehold.CodeAPIKeyInvalid, nil},
		{"force release without the admin token", func() error {
			_, err := c.ForceRelease(ctx, name, "")
			return err
		}, 401, "admin_token_required", nil},
		{"inspecting a lock never taken", func() error {
			_, err := c.InspectLock(ctx, name+"-never")
			return err
		}, 404, leasehold.CodeLockNotFound, nil},
	}
	for _, tc := range cases {
		err := tc.err()
		var p *leasehold.Problem
		if !errors.As(err, &p) || p.Status != tc.status || p.Code != tc.code || (tc.check != nil && !tc.check(p)) {
			t.Errorf("%s: want %d %s, got %v (%+v)", tc.what, tc.status, tc.code, err, p)
		}
	}
}

// An API key made by the admin is sent in Leasehold-Key.
func TestAPIKey(t *testing.T) {
	ctx, name := testCtx(t), lockName(t)
	body, _ := json.Marshal(map[string]interface{}{"name": lockName(t), "roles": []string{"client", "reader"}})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, serverURL(t)+"/v1/admin/keys", bytes.NewReader(body))
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

	c := newClient(t, leasehold.WithAPIKey(made.Secret))
	l, err := c.Lock(ctx, name, leasehold.LockOptions{})
	if err != nil {
		t.Fatalf("Lock with the key: %v", err)
	}
	if info, err := c.InspectLock(ctx, name); err != nil || !info.Held {
		t.Fatalf("inspect with the key: %+v, %v", info, err)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}
