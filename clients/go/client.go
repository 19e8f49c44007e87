package leasehold

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Version of this client, sent in its User-Agent.
const Version = "0.1.0"

// Client talks to one Leasehold server (or a load balancer in front of several). It is safe
// for concurrent use; make one and share it.
type Client struct {
	base        *url.URL
	err         error // an invalid base URL or option: every call fails with it
	http        *http.Client
	apiKey      string
	holder      string
	userAgent   string
	reqTimeout  time.Duration
	retryWindow time.Duration
	watch       bool
	watchIdle   time.Duration
	// expiringSlack is the watches' expiring_slack_ms (0: the server's default).
	expiringSlack time.Duration
}

// Option configures a Client.
type Option func(*Client)

// WithAPIKey sends the key in the Leasehold-Key header of every request (an admin token works
// there too, for ForceRelease).
func WithAPIKey(key string) Option { return func(c *Client) { c.apiKey = key } }

// WithHTTPClient uses hc instead of the client's own (which keeps connections alive, speaks
// HTTP/2 over TLS, and sets no overall timeout: each request gets its wait plus
// WithRequestTimeout). hc must not set Timeout shorter than the waits you ask for, and no
// Timeout at all if you keep leases (their watch stream stays open).
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.http = hc } }

// WithHolder sets the default holder label of new leases (shown to operators and to refused
// acquirers); LockOptions.Holder overrides it.
func WithHolder(holder string) Option { return func(c *Client) { c.holder = holder } }

// WithRequestTimeout bounds each HTTP request beyond its server-side wait (default 35 s: the
// server's own backstop is 30 s past the wait).
func WithRequestTimeout(d time.Duration) Option { return func(c *Client) { c.reqTimeout = d } }

// WithRetryWindow bounds how long one call keeps retrying 503s and dropped connections
// (default 30 s, always within its context). Heartbeats retry until the lease would expire
// instead.
func WithRetryWindow(d time.Duration) Option { return func(c *Client) { c.retryWindow = d } }

// WithoutWatch turns off the lease watch stream (for proxies that break server-sent events):
// loss is then found by the heartbeats alone, within a third of the TTL.
func WithoutWatch() Option { return func(c *Client) { c.watch = false } }

// WithExpiringSlack sets when the lease watches tell SignalExpiring: once less than d is left
// of a lease with no heartbeat since (default: a third of the TTL; the server takes at most
// half of it). LockOptions.ExpiringSlack sets one lock's. A negative d makes every call fail.
func WithExpiringSlack(d time.Duration) Option {
	return func(c *Client) {
		c.expiringSlack = d
		if d < 0 && c.err == nil {
			c.err = errNegativeSlack
		}
	}
}

var errNegativeSlack = errors.New("leasehold: the expiring slack must be positive (zero: the server's default)")

// DefaultURL is the server New talks to when given "" (the CLI's default too).
const DefaultURL = "http://127.0.0.1:8080"

// New makes a client for the server at baseURL, such as "https://locks.example.com" or ""
// for DefaultURL. An invalid URL makes every call fail with an error saying so.
func New(baseURL string, opts ...Option) *Client {
	if baseURL == "" {
		baseURL = DefaultURL
	}
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	var bad error
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		bad = fmt.Errorf("leasehold: invalid server URL %q (want http://host:port or https://...)", baseURL)
		u = &url.URL{Scheme: "http", Host: "invalid"}
	}
	c := &Client{
		base:        u,
		err:         bad, // (an option may set it too)
		userAgent:   "leasehold-go/" + Version,
		reqTimeout:  35 * time.Second,
		retryWindow: 30 * time.Second,
		watch:       true,
		watchIdle:   45 * time.Second, // three of the server's 15 s keep-alive comments
	}
	for _, o := range opts {
		o(c)
	}
	if c.http == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = 64 // heartbeats and waits of many leases at once
		t.ForceAttemptHTTP2 = true
		c.http = &http.Client{Transport: t}
	}
	return c
}

// request is one API call; do sends it, retrying when that is safe.
type request struct {
	method string
	path   string // escaped, from the API root: "/v1/locks/x/leases"
	query  url.Values
	body   interface{}
	bearer string
	// idemKey is sent as Idempotency-Key: the same on every retry of this call.
	idemKey string
	// wait is the server-side wait asked for; each attempt may take wait + reqTimeout.
	wait time.Duration
	// retry: a 503, 504, 429 rate_limited or a dropped connection is sent again (only for
	// calls that cannot act twice: reads, heartbeats, ticket polls, and changes carrying an
	// Idempotency-Key).
	retry bool
	// window overrides the client's retry window (0: the client's).
	window time.Duration
}

type response struct {
	status int
	header http.Header
	body   []byte
	sent   time.Time // when the attempt that got this answer was sent
}

func (c *Client) url(path string, q url.Values) string {
	u := *c.base
	u.Path = strings.TrimRight(c.base.Path, "/")
	full := u.String() + path
	if len(q) > 0 {
		full += "?" + q.Encode()
	}
	return full
}

func (c *Client) newHTTPRequest(ctx context.Context, r *request) (*http.Request, error) {
	var body io.Reader
	var raw []byte
	if r.body != nil {
		var err error
		raw, err = json.Marshal(r.body)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(raw)
	}
	target := r.path
	if !strings.HasPrefix(target, "http://") && !strings.HasPrefix(target, "https://") {
		target = c.url(r.path, r.query)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, target, body)
	if err != nil {
		return nil, err
	}
	if raw != nil {
		req.Header.Set("Content-Type", "application/json")
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil }
	}
	req.Header.Set("Accept", "application/json, application/problem+json")
	req.Header.Set("User-Agent", c.userAgent)
	if c.apiKey != "" {
		req.Header.Set("Leasehold-Key", c.apiKey)
	}
	if r.bearer != "" {
		req.Header.Set("Authorization", "Bearer "+r.bearer)
	}
	if r.idemKey != "" {
		req.Header.Set("Idempotency-Key", r.idemKey)
	}
	return req, nil
}

// do sends r and returns a 2xx answer, or the *Problem of an error answer, or the transport's
// error. Retries (r.retry) keep the same Idempotency-Key and honour Retry-After.
func (c *Client) do(ctx context.Context, r *request) (*response, error) {
	if c.err != nil {
		return nil, c.err
	}
	window := r.window
	if window == 0 {
		window = c.retryWindow
	}
	start := time.Now()
	var lastErr error
	for attempt := 0; ; attempt++ {
		resp, err := c.once(ctx, r)
		if err != nil && ctx.Err() != nil {
			return nil, ctxErr(ctx, lastErr)
		}
		var delay time.Duration
		switch {
		case err != nil:
			// No answer (refused, reset, dropped, timed out): unknown whether it acted.
		case resp.status >= 200 && resp.status < 300:
			return resp, nil
		default:
			p := parseProblem(resp.status, resp.header, resp.body)
			if !p.Retryable() {
				return nil, p
			}
			err = p
			delay = p.RetryAfter
		}
		if !r.retry || time.Since(start) >= window {
			return nil, err
		}
		lastErr = err
		if delay == 0 {
			delay = backoff(attempt)
		}
		if left := window - time.Since(start); delay > left {
			delay = left
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctxErr(ctx, lastErr)
		case <-t.C:
		}
	}
}

// ctxErr is ctx's error, saying what the attempts before it met (errors.Is still finds
// context.Canceled or context.DeadlineExceeded).
func ctxErr(ctx context.Context, last error) error {
	if last == nil {
		return ctx.Err()
	}
	return fmt.Errorf("%w (retrying after: %v)", ctx.Err(), last)
}

// once sends one attempt, bounded by the wait plus the request timeout.
func (c *Client) once(ctx context.Context, r *request) (*response, error) {
	actx, cancel := context.WithTimeout(ctx, r.wait+c.reqTimeout)
	defer cancel()
	req, err := c.newHTTPRequest(actx, r)
	if err != nil {
		return nil, err
	}
	sent := time.Now()
	hr, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("leasehold: %s %s: %w", r.method, r.path, err)
	}
	defer hr.Body.Close()
	body, err := io.ReadAll(io.LimitReader(hr.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("leasehold: %s %s: reading the answer: %w", r.method, r.path, err)
	}
	return &response{status: hr.StatusCode, header: hr.Header, body: body, sent: sent}, nil
}

// backoff: 100 ms doubling to 2 s, with jitter.
func backoff(attempt int) time.Duration {
	d := 100 * time.Millisecond
	for i := 0; i < attempt && d < 2*time.Second; i++ {
		d *= 2
	}
	if d > 2*time.Second {
		d = 2 * time.Second
	}
	n, err := rand.Int(rand.Reader, big.NewInt(int64(d/2)))
	if err != nil {
		return d
	}
	return d/2 + time.Duration(n.Int64())
}

// newKey makes an Idempotency-Key: a random UUID (version 4).
func newKey() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	b[6] = (b[6] & 0x0f) | 0x40
	b[8] = (b[8] & 0x3f) | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// duration is ms milliseconds as a time.Duration (zero for none).
func duration(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }

func ms(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

func decode(resp *response, v interface{}) error {
	if err := json.Unmarshal(resp.body, v); err != nil {
		return fmt.Errorf("leasehold: unexpected answer (%d): %w", resp.status, err)
	}
	return nil
}

// detached returns ctx, or, when ctx is already done, a context with its values that is not
// cancelled, bounded by d: releases must be sent even after the work's context ended.
func detached(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if ctx.Err() == nil {
		return ctx, func() {}
	}
	return context.WithTimeout(valuesOnly{ctx}, d)
}

type valuesOnly struct{ parent context.Context }

func (v valuesOnly) Deadline() (time.Time, bool)       { return time.Time{}, false }
func (v valuesOnly) Done() <-chan struct{}             { return nil }
func (v valuesOnly) Err() error                        { return nil }
func (v valuesOnly) Value(key interface{}) interface{} { return v.parent.Value(key) }

func lockPath(name string) string      { return "/v1/locks/" + url.PathEscape(name) }
func semaphorePath(name string) string { return "/v1/semaphores/" + url.PathEscape(name) }
func electionPath(name string) string  { return "/v1/elections/" + url.PathEscape(name) }

var errClosed = errors.New("leasehold: the lease is over")
