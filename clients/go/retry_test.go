package leasehold_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	leasehold "github.com/leasehold/leasehold/clients/go"
)

// lossyProxy stands between the client and the server. The first request it is told to
// spoil goes through to the server, which acts on it, but its answer is thrown away: the
// client gets a 503 (or the connection closes without an answer). Everything else passes.
type lossyProxy struct {
	t      *testing.T
	target *url.URL
	spoil  func(*http.Request) bool
	drop   bool // close the connection instead of answering 503
	rp     *httputil.ReverseProxy

	mu      sync.Mutex
	spoiled bool
	keys    []string // Idempotency-Key of every request spoil matched
}

func newLossyProxy(t *testing.T, spoil func(*http.Request) bool, drop bool) (*lossyProxy, *httptest.Server) {
	u, err := url.Parse(serverURL(t))
	if err != nil {
		t.Fatal(err)
	}
	p := &lossyProxy{t: t, target: u, spoil: spoil, drop: drop}
	p.rp = httputil.NewSingleHostReverseProxy(u)
	p.rp.FlushInterval = -1 // the watch stream
	p.rp.ErrorLog = log.New(io.Discard, "", 0)
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return p, srv
}

func (p *lossyProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !p.spoil(r) {
		p.rp.ServeHTTP(w, r)
		return
	}
	p.mu.Lock()
	p.keys = append(p.keys, r.Header.Get("Idempotency-Key"))
	first := !p.spoiled
	p.spoiled = true
	p.mu.Unlock()
	if !first {
		p.rp.ServeHTTP(w, r)
		return
	}
	// Forward it for real, and lose the answer.
	body, _ := io.ReadAll(r.Body)
	out, _ := http.NewRequestWithContext(r.Context(), r.Method, p.target.String()+r.URL.RequestURI(), bytes.NewReader(body))
	out.Header = r.Header.Clone()
	resp, err := http.DefaultTransport.RoundTrip(out)
	if err != nil {
		p.t.Errorf("proxy: forwarding %s %s: %v", r.Method, r.URL, err)
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode >= 300 {
		p.t.Errorf("proxy: the spoiled %s %s got %d from the server", r.Method, r.URL, resp.StatusCode)
	}
	if p.drop {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
		return
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Retry-After", "1")
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = io.WriteString(w, `{"type":"/problems/redis_unavailable","title":"Redis is unavailable","status":503,`+
		`"detail":"the answer was lost (test proxy)","code":"redis_unavailable","retry_after_ms":100}`)
}

func (p *lossyProxy) seen() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.keys...)
}

func isAcquire(r *http.Request) bool {
	return r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/leases")
}

func isRelease(r *http.Request) bool {
	return r.Method == http.MethodDelete && strings.Contains(r.URL.Path, "/leases/")
}

func checkSameKey(t *testing.T, keys []string) {
	t.Helper()
	if len(keys) < 2 {
		t.Fatalf("the client did not retry: %d attempts", len(keys))
	}
	for _, k := range keys {
		if k == "" || k != keys[0] {
			t.Fatalf("retries must carry the same Idempotency-Key: %q", keys)
		}
	}
}

func testAcquireRetried(t *testing.T, drop bool) {
	direct, ctx, name := newClient(t), testCtx(t), lockName(t)
	p, srv := newLossyProxy(t, isAcquire, drop)
	c := leasehold.New(srv.URL)

	l, err := c.Lock(ctx, name, leasehold.LockOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatalf("Lock through the lossy proxy: %v", err)
	}
	attempts := p.seen()
	checkSameKey(t, attempts)
	// Exactly one lease: the retry got the first grant replayed, not a second level or lease.
	info := inspect(t, direct, name)
	if len(info.Holders) != 1 || info.Holders[0].LeaseID != l.ID() || info.Holders[0].ReentryCount != 1 ||
		info.FencingCounter != l.FencingToken() {
		t.Fatalf("after a lost grant and its retry: lease %s (fence %d), lock %+v", l.ID(), l.FencingToken(), info)
	}
	// And the replayed token works.
	if n, err := l.Reenter(ctx); err != nil || n != 2 {
		t.Fatalf("reentry with the replayed token: %d, %v", n, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if inspect(t, direct, name).Held {
		t.Fatal("still held")
	}
	t.Logf("acquire whose answer was lost (%s): %d attempts, one Idempotency-Key, one lease",
		map[bool]string{true: "connection dropped", false: "503"}[drop], len(attempts))
}

func TestAcquire503RetriedWithoutDoubleGrant(t *testing.T) { testAcquireRetried(t, false) }

func TestAcquireDroppedConnectionRetried(t *testing.T) { testAcquireRetried(t, true) }

func TestRelease503Retried(t *testing.T) {
	direct, ctx, name := newClient(t), testCtx(t), lockName(t)
	p, srv := newLossyProxy(t, isRelease, false)
	c := leasehold.New(srv.URL)
	l, err := c.Lock(ctx, name, leasehold.LockOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release through the lossy proxy: %v", err)
	}
	checkSameKey(t, p.seen())
	if l.Err() != nil {
		t.Fatalf("our own release, retried, is no loss: %v", l.Err())
	}
	if inspect(t, direct, name).Held {
		t.Fatal("still held")
	}
}

// A heartbeat cannot act twice: a lost answer is simply sent again, and the lease holds on.
func TestHeartbeat503Retried(t *testing.T) {
	ctx, name := testCtx(t), lockName(t)
	p, srv := newLossyProxy(t, func(r *http.Request) bool { return strings.HasSuffix(r.URL.Path, "/heartbeat") }, false)
	c := leasehold.New(srv.URL)
	ttl := 2 * time.Second
	l, err := c.Lock(ctx, name, leasehold.LockOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "a heartbeat after the lost one", func() bool { return len(p.seen()) >= 3 })
	if l.Err() != nil {
		t.Fatalf("lost after a 503 heartbeat: %v", l.Err())
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Heartbeats that keep failing: the lease is given up as lost (ReasonUnrenewable) before its
// TTL can run out on the server, and Release still gives it back.
func TestUnrenewableLeaseIsLostBeforeItsTTL(t *testing.T) {
	direct, ctx, name := newClient(t), testCtx(t), lockName(t)
	u, _ := url.Parse(serverURL(t))
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	rp.ErrorLog = log.New(io.Discard, "", 0)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/heartbeat") || strings.HasSuffix(r.URL.Path, "/watch") {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"type":"/problems/redis_unavailable","title":"Redis is unavailable","status":503,"detail":"test proxy","code":"redis_unavailable"}`)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	defer srv.Close()
	c := leasehold.New(srv.URL)
	ttl := 1500 * time.Millisecond
	start := time.Now()
	l, err := c.Lock(ctx, name, leasehold.LockOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Lost():
	case <-time.After(2 * ttl):
		t.Fatal("not given up")
	}
	after := time.Since(start)
	var lost *leasehold.LostError
	if !errors.As(l.Err(), &lost) || lost.Reason != leasehold.ReasonUnrenewable || lost.Cause == nil {
		t.Fatalf("Err: %v", l.Err())
	}
	if after >= ttl {
		t.Fatalf("given up %v after the grant: not before the %v TTL", after, ttl)
	}
	if !inspect(t, direct, name).Held {
		t.Fatal("the server should still hold it (only the client could not renew)")
	}
	if err := l.Release(ctx); !errors.Is(err, leasehold.ErrLeaseLost) {
		t.Fatalf("Release: %v", err)
	}
	if inspect(t, direct, name).Held {
		t.Fatal("Release did not give the unrenewable lease back")
	}
	t.Logf("a %v lease whose heartbeats all failed was given up %v after its grant: %v", ttl, after.Round(time.Millisecond), lost)
}

// HTTP keep-alive: one connection carries many calls.
func TestKeepAlive(t *testing.T) {
	ctx, name := testCtx(t), lockName(t)
	u, _ := url.Parse(serverURL(t))
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ErrorLog = log.New(io.Discard, "", 0)
	srv := httptest.NewUnstartedServer(rp)
	var mu sync.Mutex
	conns := 0
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			mu.Lock()
			conns++
			mu.Unlock()
		}
	}
	srv.Start()
	defer srv.Close()
	c := leasehold.New(srv.URL, leasehold.WithoutWatch())
	for i := 0; i < 10; i++ {
		l, err := c.Lock(ctx, name, leasehold.LockOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Reenter(ctx); err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if conns != 1 {
		t.Fatalf("30 calls one after the other opened %d connections, want 1", conns)
	}
}
