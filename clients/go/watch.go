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

type lostEventJSON struct {
	Reason string `json:"reason"`
	Lock   string `json:"lock"` // a multilease's: the member whose end ended it
}

// watchLoop keeps the lease's watch stream open; a stream that ends without "lost" is opened
// again, with Last-Event-ID (the server goes on counting, and tells again what still stands).
func (l *Lease) watchLoop() {
	defer close(l.watchDone)
	attempt := 0
	for l.inner.Err() == nil {
		opened := time.Now()
		final, retryAfter := l.watchOnce()
		if final {
			return
		}
		if time.Since(opened) > 10*time.Second {
			attempt = 0
		}
		d := retryAfter
		if d == 0 {
			d = backoff(attempt)
		}
		attempt++
		select {
		case <-l.inner.Done():
			return
		case <-time.After(d):
		}
	}
}

// watchOnce reads one watch stream; final is true when watching is over (the lease is lost
// or released, or the server refuses to let us watch: the heartbeats still tell then).
func (l *Lease) watchOnce() (final bool, retryAfter time.Duration) {
	ctx, cancel := context.WithCancel(l.inner)
	defer cancel()
	// No keep-alive comment for three of the server's intervals (15 s): the connection is dead.
	idle := time.AfterFunc(l.c.watchIdle, cancel)
	defer idle.Stop()
	req, err := l.c.newHTTPRequest(ctx, &request{method: http.MethodGet, path: l.leasePath() + "/watch",
		query: l.watchQuery(), bearer: l.token})
	if err != nil {
		return true, 0
	}
	req.Header.Set("Accept", "text/event-stream")
	if l.lastEventID != "" {
		req.Header.Set("Last-Event-ID", l.lastEventID)
	}
	hr, err := l.c.http.Do(req)
	if err != nil {
		return false, 0
	}
	defer hr.Body.Close()
	if hr.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(hr.Body, 64<<10))
		p := parseProblem(hr.StatusCode, hr.Header, body)
		if lost := lostFrom(p); lost != nil {
			l.markLost(lost)
			return true, 0
		}
		if p.Retryable() || p.Status == http.StatusConflict {
			return false, p.RetryAfter
		}
		return true, 0
	}
	br := bufio.NewReader(hr.Body)
	var event, data, id string
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return false, 0
		}
		idle.Reset(l.c.watchIdle)
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			if id != "" {
				l.lastEventID = id
			}
			if event == "lost" {
				var ev lostEventJSON
				_ = json.Unmarshal([]byte(data), &ev)
				if ev.Reason == "" {
					ev.Reason = "lost"
				}
				lost := &LostError{Reason: ev.Reason}
				if l.place.shape == shapeMultilease {
					lost.Member = ev.Lock
				}
				l.markLost(lost)
				return true, 0
			}
			if event != "" {
				l.onWatchEvent(event, id, data)
			}
			event, data, id = "", "", ""
			continue
		}
		if strings.HasPrefix(line, ":") {
			continue // keep-alive comment
		}
		field, value := line, ""
		if i := strings.IndexByte(line, ':'); i >= 0 {
			field, value = line[:i], strings.TrimPrefix(line[i+1:], " ")
		}
		switch field {
		case "event":
			event = value
		case "id":
			id = value
		case "data":
			if data != "" {
				data += "\n"
			}
			data += value
		}
	}
}
