package leasehold_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	leasehold "github.com/leasehold/leasehold/clients/go"
)

// The tests run against a real server: clients/go/test.sh starts one (with its Redis) and
// sets these. Without them every server test skips, saying so.
const (
	envURL   = "LEASEHOLD_TEST_URL"
	envAdmin = "LEASEHOLD_TEST_ADMIN_TOKEN"
)

func serverURL(t *testing.T) string {
	t.Helper()
	u := os.Getenv(envURL)
	if u == "" {
		t.Skipf("%s is not set: run clients/go/test.sh, which starts a Leasehold server for these tests", envURL)
	}
	return u
}

func adminToken(t *testing.T) string {
	t.Helper()
	tok := os.Getenv(envAdmin)
	if tok == "" {
		t.Skipf("%s is not set: run clients/go/test.sh, which starts a Leasehold server for these tests", envAdmin)
	}
	return tok
}

func newClient(t *testing.T, opts ...leasehold.Option) *leasehold.Client {
	t.Helper()
	return leasehold.New(serverURL(t), opts...)
}

func adminClient(t *testing.T) *leasehold.Client {
	t.Helper()
	return leasehold.New(serverURL(t), leasehold.WithAPIKey(adminToken(t)))
}

// lockName is a fresh lock name per test (the server is shared by every test of the run).
func lockName(t *testing.T) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	n := strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
	return "go-" + n + "-" + hex.EncodeToString(b[:])
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// waitFor polls cond (every 5 ms) until it holds, for at most d: for states the test cannot
// be told of, such as "the server has this request waiting".
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func inspect(t *testing.T, c *leasehold.Client, name string) *leasehold.LockInfo {
	t.Helper()
	info, err := c.InspectLock(context.Background(), name)
	if err != nil {
		if isCode(err, leasehold.CodeLockNotFound) {
			return &leasehold.LockInfo{Lock: name}
		}
		t.Fatalf("inspect %s: %v", name, err)
	}
	return info
}

func isCode(err error, code string) bool {
	var p *leasehold.Problem
	return err != nil && errors.As(err, &p) && p.Code == code
}

type result struct {
	lease *leasehold.Lease
	err   error
	at    time.Time
}

func recv(t *testing.T, ch <-chan result, d time.Duration, what string) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(d):
		t.Fatalf("timed out after %v waiting for %s", d, what)
	}
	return result{}
}

// countingTransport counts the answers by status (to see the fair lock's 202s, which Lock
// never shows).
type countingTransport struct {
	base     http.RoundTripper
	mu       sync.Mutex
	byStatus map[int]int
	watches  int
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.base.RoundTrip(r)
	if err == nil {
		c.mu.Lock()
		if c.byStatus == nil {
			c.byStatus = map[int]int{}
		}
		c.byStatus[resp.StatusCode]++
		if resp.StatusCode == http.StatusOK && strings.HasSuffix(r.URL.Path, "/watch") {
			c.watches++
		}
		c.mu.Unlock()
	}
	return resp, err
}

// watchesOpen counts the watch streams the server has accepted.
func (c *countingTransport) watchesOpen() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.watches
}

func countingClient(t *testing.T, opts ...leasehold.Option) (*leasehold.Client, *countingTransport) {
	ct := &countingTransport{base: http.DefaultTransport.(*http.Transport).Clone()}
	return newClient(t, append(opts, leasehold.WithHTTPClient(&http.Client{Transport: ct}))...), ct
}

func (c *countingTransport) count(status int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byStatus[status]
}

// assertGivenUpAsRevoked waits for a lease whose revocation was ignored to be lost, and checks
// the one rule every kind of lock keeps: lost with reason revoked (an ErrLeaseLost), carrying
// the revocation asked for with reason, given up before deadline less the margin (so the work
// stops before the server may grant the lock to anyone else), and still showing that
// revocation. The revocations the callers ask for have 3 s of grace, hence the 5 s wait.
func assertGivenUpAsRevoked(t *testing.T, lease *leasehold.Lease, reason string, deadline time.Time) {
	t.Helper()
	select {
	case <-lease.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("not lost within 5 s of a 3 s revocation")
	}
	var lost *leasehold.LostError
	if !errors.As(lease.Err(), &lost) || lost.Reason != leasehold.ReasonRevoked || !errors.Is(lease.Err(), leasehold.ErrLeaseLost) {
		t.Fatalf("lost with %v, want reason revoked", lease.Err())
	}
	if lost.Revocation == nil || lost.Revocation.Reason != reason {
		t.Fatalf("the loss does not carry the revocation: %+v", lost.Revocation)
	}
	if !lost.At.Before(deadline.Add(-500 * time.Millisecond)) {
		t.Fatalf("given up at %v, not before the deadline %v less the margin", lost.At, deadline)
	}
	if r := lease.Revocation(); r == nil || !r.Deadline.Equal(deadline) {
		t.Fatalf("lease.Revocation() = %+v", r)
	}
}

// releaseGivenUp releases a lease given up as revoked: Release still reports the loss (so a
// caller that only looks at Release's error learns of it), and gives the lock back before the
// revocation's deadline rather than leaving the server to take it then.
func releaseGivenUp(t *testing.T, c *leasehold.Client, ctx context.Context, lease *leasehold.Lease, name string) {
	t.Helper()
	var lost *leasehold.LostError
	if err := lease.Release(ctx); !errors.As(err, &lost) || lost.Reason != leasehold.ReasonRevoked {
		t.Fatalf("Release after the loss: %v", err)
	}
	if info := inspect(t, c, name); info.Held {
		t.Fatalf("still held after the release of a lease given up: %+v", info)
	}
}
