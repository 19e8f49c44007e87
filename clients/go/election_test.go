package leasehold_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	leasehold "github.com/leasehold/leasehold/clients/go"
)

func TestCampaignLeadsAtOnceAndResigns(t *testing.T) {
	ctx, c, name := testCtx(t), newClient(t), lockName(t)
	term, err := c.Campaign(ctx, name, leasehold.CampaignValue("10.0.0.1:8080"), leasehold.CampaignTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if term.Number() <= 0 || term.Value() != "10.0.0.1:8080" || term.Name() != name {
		t.Fatalf("term %d value %q name %q", term.Number(), term.Value(), term.Name())
	}
	e, err := c.Leader(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if e.Leader == nil || e.Leader.CandidateID != term.CandidateID() || e.Leader.Term != term.Number() {
		t.Fatalf("leader %+v", e.Leader)
	}
	if check, err := c.CheckTerm(ctx, name, term.Number()); err != nil || !check.Current {
		t.Fatalf("check %+v, %v", check, err)
	}
	if err := term.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if term.Context().Err() == nil {
		t.Fatal("the term's context goes on after the resignation")
	}
	if e, err := c.Leader(ctx, name); err != nil || e.Leader != nil {
		t.Fatalf("after resigning: %+v, %v", e, err)
	}
}

func TestCampaignWaitsInLineAndTakesOver(t *testing.T) {
	ctx, c, name := testCtx(t), newClient(t), lockName(t)
	first, err := c.Campaign(ctx, name, leasehold.CampaignValue("a"), leasehold.CampaignTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		term *leasehold.Term
		err  error
	}
	done := make(chan result, 1)
	go func() {
		term, err := c.Campaign(ctx, name, leasehold.CampaignValue("b"), leasehold.CampaignTTL(time.Second))
		done <- result{term, err}
	}()
	waitFor(t, 5*time.Second, "the second candidate in line", func() bool {
		e, err := c.Leader(ctx, name)
		return err == nil && len(e.Candidates) == 1
	})
	time.Sleep(2500 * time.Millisecond) // several TTLs: polls keep its place, heartbeats the term
	if e, _ := c.Leader(ctx, name); len(e.Candidates) != 1 || e.Leader.Term != first.Number() {
		t.Fatalf("after 2.5 s: %+v", e)
	}
	if err := first.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.term.Resign(ctx)
	if r.term.Number() <= first.Number() || r.term.Value() != "b" {
		t.Fatalf("second term %d (first %d), value %q", r.term.Number(), first.Number(), r.term.Value())
	}
}

func TestCampaignCutShortLeavesTheLine(t *testing.T) {
	ctx, c, name := testCtx(t), newClient(t), lockName(t)
	first, err := c.Campaign(ctx, name, leasehold.CampaignValue("a"))
	if err != nil {
		t.Fatal(err)
	}
	defer first.Resign(ctx)
	_, err = c.Campaign(ctx, name, leasehold.CampaignValue("b"), leasehold.CampaignWait(300*time.Millisecond))
	if !errors.Is(err, leasehold.ErrLockHeld) {
		t.Fatalf("want lock_held, got %v", err)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := c.Campaign(short, name, leasehold.CampaignValue("c")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want the context's end, got %v", err)
	}
	if e, err := c.Leader(ctx, name); err != nil || len(e.Candidates) != 0 {
		t.Fatalf("the line: %+v, %v", e, err)
	}
}

func TestEndTermIsTheLoss(t *testing.T) {
	ctx, c, name := testCtx(t), newClient(t), lockName(t)
	term, err := c.Campaign(ctx, name, leasehold.CampaignValue("a"), leasehold.CampaignTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := adminClient(t).EndTerm(ctx, name, "test"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-term.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("not told of the loss")
	}
	var lost *leasehold.LostError
	if !errors.As(term.Err(), &lost) || lost.Reason != "force_released" || term.Context().Err() == nil {
		t.Fatalf("err %v", term.Err())
	}
	if err := term.Proclaim(ctx, "late"); !errors.Is(err, leasehold.ErrLeaseLost) {
		t.Fatalf("proclaim after the loss: %v", err)
	}
	if err := term.Resign(ctx); !errors.As(err, &lost) {
		t.Fatalf("resign after the loss: %v", err)
	}
}

func TestTermLostWhenItsTTLRunsOut(t *testing.T) {
	ctx, name := testCtx(t), lockName(t)
	// Heartbeats that never reach the server (a partition): the term is given up, then gone.
	blocked := &cuttingTransport{inner: http.DefaultTransport, refuse: "/heartbeat"}
	c := newClient(t, leasehold.WithHTTPClient(&http.Client{Transport: blocked}), leasehold.WithoutWatch())
	term, err := c.Campaign(ctx, name, leasehold.CampaignValue("a"), leasehold.CampaignTTL(900*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-term.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("not lost")
	}
	time.Sleep(time.Second)
	if e, _ := newClient(t).Leader(ctx, name); e.Leader != nil {
		t.Fatalf("still leads: %+v", e.Leader)
	}
}

func TestBadValuesAreProblems(t *testing.T) {
	ctx, c, name := testCtx(t), newClient(t), lockName(t)
	_, err := c.Campaign(ctx, name, leasehold.CampaignValue(strings.Repeat("x", 4097)))
	var p *leasehold.Problem
	if !errors.As(err, &p) || p.Code != "invalid_body" || p.Status != 422 {
		t.Fatalf("want 422 invalid_body, got %v", err)
	}
	term, err := c.Campaign(ctx, name, leasehold.CampaignValue("ok"))
	if err != nil {
		t.Fatal(err)
	}
	defer term.Resign(ctx)
	if err := term.Proclaim(ctx, strings.Repeat("y", 4097)); !errors.As(err, &p) || p.Code != "invalid_body" {
		t.Fatalf("want invalid_body, got %v", err)
	}
	if term.Value() != "ok" || term.Err() != nil {
		t.Fatalf("value %q err %v", term.Value(), term.Err())
	}
}

func TestObserveTellsEveryChangeAndResumes(t *testing.T) {
	ctx, c, name := testCtx(t), newClient(t), lockName(t)
	cut := &cuttingTransport{inner: http.DefaultTransport, gate: make(chan struct{})}
	watcher := newClient(t, leasehold.WithHTTPClient(&http.Client{Transport: cut}))
	octx, stop := context.WithCancel(ctx)
	events, err := watcher.Observe(octx, name)
	if err != nil {
		t.Fatal(err)
	}
	next := func() leasehold.ElectionEvent {
		t.Helper()
		select {
		case ev := <-events:
			return ev
		case <-time.After(10 * time.Second):
			t.Fatal("no event")
			return leasehold.ElectionEvent{}
		}
	}
	want := func(ev leasehold.ElectionEvent, kind string, term int64, value string) {
		t.Helper()
		if ev.Kind != kind || ev.Term != term || ev.Value != value {
			t.Fatalf("got %+v, want %s %d %q", ev, kind, term, value)
		}
	}
	want(next(), leasehold.EventVacant, 0, "")
	first, err := c.Campaign(ctx, name, leasehold.CampaignValue("a"))
	if err != nil {
		t.Fatal(err)
	}
	want(next(), leasehold.EventLeader, first.Number(), "a")
	if err := first.Proclaim(ctx, "a2"); err != nil {
		t.Fatal(err)
	}
	proclaimed := next()
	want(proclaimed, leasehold.EventLeader, first.Number(), "a2")
	cut.cutNext() // the next message (the vacancy) is lost with the connection
	if err := first.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the stream cut", cut.wasCut)
	// A whole term while the observer is away: the resumed stream tells it.
	second, err := c.Campaign(ctx, name, leasehold.CampaignValue("b"))
	if err != nil {
		t.Fatal(err)
	}
	if err := second.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	close(cut.gate)
	want(next(), leasehold.EventLeader, second.Number(), "b")
	want(next(), leasehold.EventVacant, second.Number(), "")
	if got := cut.lastEventIDs(); len(got) < 2 || got[0] != "" || got[1] != proclaimed.ID {
		t.Fatalf("Last-Event-ID sent: %q (want then %q)", got, proclaimed.ID)
	}
	stop()
	for range events {
	} // closed once ctx ends
}

// cuttingTransport drops an observe stream on demand (cutNext: the next chunk is lost with
// it) and holds reconnections until gate is closed; it refuses requests whose path ends in
// refuse (no answer, as in a partition).
type cuttingTransport struct {
	inner  http.RoundTripper
	gate   chan struct{}
	refuse string

	mu      sync.Mutex
	cut     bool
	didCut  bool
	lastIDs []string
}

func (c *cuttingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if c.refuse != "" && strings.HasSuffix(r.URL.Path, c.refuse) {
		return nil, errors.New("refused by the test")
	}
	if !strings.HasSuffix(r.URL.Path, "/observe") {
		return c.inner.RoundTrip(r)
	}
	c.mu.Lock()
	again := len(c.lastIDs) > 0
	c.lastIDs = append(c.lastIDs, r.Header.Get("Last-Event-ID"))
	c.mu.Unlock()
	if again && c.gate != nil {
		<-c.gate
	}
	resp, err := c.inner.RoundTrip(r)
	if err == nil {
		resp.Body = &cutBody{ReadCloser: resp.Body, t: c}
	}
	return resp, err
}

func (c *cuttingTransport) cutNext() { c.mu.Lock(); c.cut = true; c.mu.Unlock() }
func (c *cuttingTransport) wasCut() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.didCut
}
func (c *cuttingTransport) lastEventIDs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.lastIDs...)
}

type cutBody struct {
	io.ReadCloser
	t *cuttingTransport
}

func (b *cutBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.t.mu.Lock()
	defer b.t.mu.Unlock()
	if b.t.cut && n > 0 {
		b.t.cut, b.t.didCut = false, true
		return 0, io.ErrUnexpectedEOF
	}
	return n, err
}

// heartbeatRecorder keeps the query of every heartbeat sent.
type heartbeatRecorder struct {
	mu      sync.Mutex
	queries []string
}

func (h *heartbeatRecorder) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.HasSuffix(r.URL.Path, "/heartbeat") {
		h.mu.Lock()
		h.queries = append(h.queries, r.URL.RawQuery)
		h.mu.Unlock()
	}
	return http.DefaultTransport.RoundTrip(r)
}

func (h *heartbeatRecorder) seen() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.queries...)
}

func TestTermHeartbeatsNameTheirTerm(t *testing.T) {
	ctx, name := testCtx(t), lockName(t)
	rec := &heartbeatRecorder{}
	c := newClient(t, leasehold.WithHTTPClient(&http.Client{Transport: rec}), leasehold.WithoutWatch())
	term, err := c.Campaign(ctx, name, leasehold.CampaignValue("a"), leasehold.CampaignTTL(900*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	// Kept across several heartbeats, each naming the term, the term unchanged.
	want := "term=" + strconv.FormatInt(term.Number(), 10)
	deadline := time.Now().Add(5 * time.Second)
	for len(rec.seen()) < 3 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	seen := rec.seen()
	if len(seen) < 3 {
		t.Fatalf("heartbeats %v", seen)
	}
	for _, q := range seen {
		if q != want {
			t.Fatalf("heartbeat query %q, want %q", q, want)
		}
	}
	if term.Err() != nil {
		t.Fatalf("lost: %v", term.Err())
	}
	if e, err := c.Leader(ctx, name); err != nil || e.Leader == nil || e.Leader.Term != term.Number() {
		t.Fatalf("leader %+v, %v", e, err)
	}
	// A heartbeat naming another term lets the candidate go (410): the client's next
	// heartbeat, naming its own, is answered 410 too, and that is the loss.
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, serverURL(t)+"/v1/elections/"+url.PathEscape(name)+
		"/candidates/"+url.PathEscape(term.CandidateID())+"/heartbeat?term="+strconv.FormatInt(term.Number()+1, 10), nil)
	req.Header.Set("Authorization", "Bearer "+term.Lease().Token())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusGone {
		t.Fatalf("heartbeat with another term: %d", resp.StatusCode)
	}
	select {
	case <-term.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("not told of the loss")
	}
	var lost *leasehold.LostError
	if !errors.As(term.Err(), &lost) || lost.Problem == nil || lost.Problem.Status != http.StatusGone {
		t.Fatalf("err %v", term.Err())
	}
	if err := term.Resign(ctx); !errors.As(err, &lost) {
		t.Fatalf("resign after the loss: %v", err)
	}
}
