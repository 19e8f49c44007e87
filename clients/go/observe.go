package leasehold

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"time"
)

// Election is what Leader answers (GET /v1/elections/{name}).
type Election struct {
	Election string `json:"election"`
	// Leader is nil when nobody leads.
	Leader *LeaderInfo `json:"leader"`
	// Term is the last term handed out (the leader's, while one leads); 0 before the first.
	Term int64 `json:"term"`
	// Candidates are the first candidates in line, in order.
	Candidates        []CandidateInfo `json:"candidates"`
	CandidatesWaiting int             `json:"candidates_waiting"`
}

// LeaderInfo is an election's leader as anyone may see it.
type LeaderInfo struct {
	CandidateID string `json:"candidate_id"`
	Term        int64  `json:"term"`
	Value       string `json:"value"`
	Holder      string `json:"holder"`
	Since       string `json:"since"`
	ExpiresAt   string `json:"expires_at"`
}

// CandidateInfo is a candidate waiting in line.
type CandidateInfo struct {
	Position    int    `json:"position"`
	CandidateID string `json:"candidate_id"`
	Holder      string `json:"holder"`
	Since       string `json:"since"`
}

// Leader reads election name: its leader (nil when nobody leads), last term and line.
func (c *Client) Leader(ctx context.Context, name string) (*Election, error) {
	return get[Election](ctx, c, electionPath(name), nil)
}

// The kinds of ElectionEvent.
const (
	// EventLeader: a new term, or a new value in the same term.
	EventLeader = "leader"
	// EventVacant: nobody leads; Term is the last one.
	EventVacant = "vacant"
	// EventResync: a resumed stream could not reach back far enough: terms may be missing.
	EventResync = "resync"
)

// ElectionEvent is one change Observe tells.
type ElectionEvent struct {
	// Kind is EventLeader, EventVacant or EventResync.
	Kind        string `json:"-"`
	Term        int64  `json:"term"`
	Value       string `json:"value"`
	Holder      string `json:"holder"`
	Since       string `json:"since"`
	CandidateID string `json:"candidate_id"`
	// ID is its place in the election's terms log (what a reconnection resumes from).
	ID string `json:"-"`
}

// Observe follows election name: the state now, then every change in order, on the
// returned channel, which is closed when ctx ends. A dropped or silent stream is opened again
// with Last-Event-ID (the last event's ID), so no term is skipped. An error only when the
// first connection is refused for good (a bad name, a missing role); later refusals of that
// kind close the channel.
func (c *Client) Observe(ctx context.Context, name string) (<-chan ElectionEvent, error) {
	o := &observer{c: c, path: electionPath(name) + "/observe", out: make(chan ElectionEvent, 16)}
	body, err := o.open(ctx)
	if err != nil {
		return nil, err
	}
	go o.run(ctx, body)
	return o.out, nil
}

type observer struct {
	c    *Client
	path string
	out  chan ElectionEvent
	last string
	// idle cancels the stream being read when it is silent too long.
	idle *time.Timer
}

// open connects once; a nil body with a nil error means "try again later".
func (o *observer) open(ctx context.Context) (io.ReadCloser, error) {
	sctx, cancel := context.WithCancel(ctx)
	req, err := o.c.newHTTPRequest(sctx, &request{method: http.MethodGet, path: o.path})
	if err != nil {
		cancel()
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	if o.last != "" {
		req.Header.Set("Last-Event-ID", o.last)
	}
	hr, err := o.c.http.Do(req)
	if err != nil {
		cancel()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, nil
	}
	if hr.StatusCode != http.StatusOK {
		defer cancel()
		raw, _ := io.ReadAll(io.LimitReader(hr.Body, 64<<10))
		hr.Body.Close()
		p := parseProblem(hr.StatusCode, hr.Header, raw)
		if p.Retryable() || p.Status == http.StatusTooManyRequests {
			return nil, nil
		}
		return nil, p
	}
	o.idle = time.AfterFunc(o.c.watchIdle, cancel)
	return cancelOnClose{hr.Body, cancel}, nil
}

type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b cancelOnClose) Close() error {
	b.cancel()
	return b.ReadCloser.Close()
}

// run reads streams until ctx ends, opening them again after a pause.
func (o *observer) run(ctx context.Context, body io.ReadCloser) {
	defer close(o.out)
	attempt := 0
	for {
		if body != nil {
			if o.read(ctx, body) {
				attempt = 0
			}
			body.Close()
			o.idle.Stop()
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff(attempt)):
		}
		attempt++
		var err error
		body, err = o.open(ctx)
		if err != nil {
			return
		}
	}
}

// read tells each event of one stream; true when it told any.
func (o *observer) read(ctx context.Context, body io.Reader) (told bool) {
	br := bufio.NewReader(body)
	var event, data, id string
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return told
		}
		o.idle.Reset(o.c.watchIdle)
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			if event == EventLeader || event == EventVacant || event == EventResync {
				ev := ElectionEvent{}
				_ = json.Unmarshal([]byte(data), &ev)
				ev.Kind, ev.ID = event, id
				if id != "" {
					o.last = id
				}
				select {
				case o.out <- ev:
					told = true
				case <-ctx.Done():
					return told
				}
			}
			event, data = "", ""
			continue
		}
		if strings.HasPrefix(line, ":") {
			continue
		}
		field, value := line, ""
		if i := strings.IndexByte(line, ':'); i >= 0 {
			field, value = line[:i], strings.TrimPrefix(line[i+1:], " ")
		}
		switch field {
		case "event":
			event = value
		case "data":
			if data != "" {
				data += "\n"
			}
			data += value
		case "id":
			id = value
		}
	}
}
