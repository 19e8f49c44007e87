package leasehold

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Problem is an error answer of the server (application/problem+json), or an answer that was
// not one (a proxy's 502 page: then Code is empty and Detail holds the start of the body).
//
// Both forms of errors.As work:
//
//	var p *leasehold.Problem
//	if errors.As(err, &p) && p.Code == leasehold.CodeLockHeld { ... p.Holder, p.RetryAfter ... }
//
//	var p leasehold.Problem
//	if errors.As(err, &p) { ... }
type Problem struct {
	Type   string // "/problems/<code>", which serves a short description
	Title  string
	Status int    // the HTTP status
	Detail string // for people
	Code   string // stable machine code: CodeLockHeld, CodeLeaseLost, ...

	// RetryAfter is when a retry may succeed (retry_after_ms, else the Retry-After header);
	// zero when the server said nothing.
	RetryAfter time.Duration
	// Wait is the server-side wait this acquire was allowed (wait_ms), when the answer says.
	Wait time.Duration

	Holder string // lock_held: the holder's label
	// HeldSince (lock_held) is when the holding lease was granted (RFC 3339; empty for a
	// Redisson client), HeldFor how long it had been held when the server answered.
	HeldSince string
	HeldFor   time.Duration
	// EstimatedWait (lock_held) is the server's estimate, from the name's recent hold times,
	// of how long until the holder lets go; zero when it had none (fewer than three past holds
	// of the name: Extra has no "estimated_wait_ms" then) or the holder is overdue.
	EstimatedWait time.Duration
	LeaseID       string // lock_held: the holding lease (empty for a Redisson client)
	HolderID      string // lock_held: the Redis hash field of the holder
	HeldAs        string // kind_conflict: what the lock is used as
	Limit         int    // limit_mismatch: the semaphore's limit
	Mode          string // mode_not_held: the mode asked for
	Reason        string // lease_lost: expired, released, force_released, left, ...
	// Member is the multilease's lock the problem is about: the member whose end ended it
	// (lease_lost), or the one in use as another kind (kind_conflict).
	Member string
	// DelayedUntil (lock_delay) is when the lock's lock-delay ends (RFC 3339).
	DelayedUntil string
	// Members (a refused multilease's lock_held) names each lock refused, with its code
	// (lock_held, lock_delay, ...) and holder.
	Members []RefusedMember

	// Extra holds every member of the problem, the ones above included, as sent.
	Extra map[string]json.RawMessage
}

// Error says the status, the code and the detail.
func (p Problem) Error() string {
	var b strings.Builder
	b.WriteString("leasehold: ")
	if p.Status != 0 {
		b.WriteString(strconv.Itoa(p.Status))
		b.WriteByte(' ')
	}
	if p.Code != "" {
		b.WriteString(p.Code)
	} else if p.Title != "" {
		b.WriteString(p.Title)
	} else {
		b.WriteString("error")
	}
	if p.Detail != "" {
		b.WriteString(": ")
		b.WriteString(p.Detail)
	}
	return b.String()
}

// Is makes errors.Is(err, leasehold.ErrLockHeld) (or any *Problem with a code) match every
// problem with that code.
func (p Problem) Is(target error) bool {
	switch t := target.(type) {
	case *Problem:
		return t != nil && t.Code != "" && t.Code == p.Code
	case Problem:
		return t.Code != "" && t.Code == p.Code
	}
	return false
}

// As lets errors.As fill a Problem value (var p leasehold.Problem; errors.As(err, &p)) as
// well as a *Problem.
func (p Problem) As(target interface{}) bool {
	if t, ok := target.(*Problem); ok && t != nil {
		*t = p
		return true
	}
	return false
}

// Retryable says whether the same request may succeed later: 503s, a 504 backstop and a
// rate limit (the quota and the other 429s are not).
func (p Problem) Retryable() bool {
	switch {
	case p.Status == http.StatusServiceUnavailable, p.Status == http.StatusGatewayTimeout,
		p.Status == http.StatusBadGateway:
		return true
	case p.Status == http.StatusTooManyRequests:
		return p.Code == CodeRateLimited || p.Code == ""
	}
	return false
}

type problemJSON struct {
	Type         string          `json:"type"`
	Title        string          `json:"title"`
	Status       int             `json:"status"`
	Detail       string          `json:"detail"`
	Code         string          `json:"code"`
	RetryAfterMs *int64          `json:"retry_after_ms"`
	WaitMs       *int64          `json:"wait_ms"`
	Holder       string          `json:"holder"`
	HeldSince    string          `json:"held_since"`
	HeldForMs    int64           `json:"held_for_ms"`
	EstimatedMs  int64           `json:"estimated_wait_ms"`
	LeaseID      string          `json:"lease_id"`
	HolderID     string          `json:"holder_id"`
	HeldAs       string          `json:"held_as"`
	Limit        int             `json:"limit"`
	Mode         string          `json:"mode"`
	Reason       string          `json:"reason"`
	Member       string          `json:"member"`
	DelayedUntil string          `json:"delayed_until"`
	Members      []RefusedMember `json:"members"`
}

// RefusedMember is one lock a multilease could not take: why (Code: lock_held, lock_delay,
// ...) and who holds it.
type RefusedMember struct {
	Lock    string `json:"lock"`
	Code    string `json:"code"`
	Detail  string `json:"detail"`
	Holder  string `json:"holder"`
	LeaseID string `json:"lease_id"`
	// RetryAfterMs is when that lock should be free, in ms (0: not known).
	RetryAfterMs int64 `json:"retry_after_ms"`
}

// parseProblem reads an error answer; it never fails (an answer that is not a problem becomes
// one without a code).
func parseProblem(status int, header http.Header, body []byte) *Problem {
	p := &Problem{Status: status}
	var pj problemJSON
	if err := json.Unmarshal(body, &pj); err == nil && (pj.Code != "" || pj.Type != "") {
		p.Type, p.Title, p.Detail, p.Code = pj.Type, pj.Title, pj.Detail, pj.Code
		if pj.Status != 0 {
			p.Status = pj.Status
		}
		if pj.RetryAfterMs != nil {
			p.RetryAfter = time.Duration(*pj.RetryAfterMs) * time.Millisecond
		}
		if pj.WaitMs != nil {
			p.Wait = time.Duration(*pj.WaitMs) * time.Millisecond
		}
		p.Holder, p.LeaseID, p.HolderID, p.HeldAs = pj.Holder, pj.LeaseID, pj.HolderID, pj.HeldAs
		p.Limit, p.Mode, p.Reason = pj.Limit, pj.Mode, pj.Reason
		p.Member, p.DelayedUntil, p.Members = pj.Member, pj.DelayedUntil, pj.Members
		p.HeldSince, p.HeldFor, p.EstimatedWait = pj.HeldSince, duration(pj.HeldForMs), duration(pj.EstimatedMs)
		_ = json.Unmarshal(body, &p.Extra)
	} else {
		p.Title = http.StatusText(status)
		d := strings.TrimSpace(string(body))
		if len(d) > 200 {
			d = d[:200] + "..."
		}
		p.Detail = d
	}
	if p.RetryAfter == 0 {
		if s := header.Get("Retry-After"); s != "" {
			if n, err := strconv.Atoi(strings.TrimSpace(s)); err == nil && n > 0 {
				p.RetryAfter = time.Duration(n) * time.Second
			}
		}
	}
	if p.Wait == 0 {
		if s := header.Get("Leasehold-Wait-Ms"); s != "" {
			if n, err := strconv.ParseInt(s, 10, 64); err == nil {
				p.Wait = time.Duration(n) * time.Millisecond
			}
		}
	}
	return p
}

// Reasons of a LostError besides the server's (expired, released, force_released, evicted...).
const (
	// ReasonUnrenewable: heartbeats kept failing (server unreachable, 503s) until too little of
	// the TTL was left to be sure the lease still held. The server may still hold it for the
	// rest of its TTL; Release tries to give it back.
	ReasonUnrenewable = "unrenewable"
	// ReasonNotFound: the server no longer knows the lease (404 lease_not_found).
	ReasonNotFound = "not_found"
	// ReasonTermChanged: an election term's heartbeat answered a term other than the one
	// held (a server that ignored ?term=: Redis lost the grant and the candidate leads again
	// in a new term). The held term is over; Resign gives the new one up.
	ReasonTermChanged = "term_changed"
)

// LostError says a lease was lost while it was held: Lease.Err returns it, Release returns it
// when the lease had been lost before, WithLock returns it. errors.Is(err, ErrLeaseLost) is
// true for it; when the server told (a 410), errors.As finds that *Problem too.
type LostError struct {
	Lock    string // the lease's Name
	LeaseID string
	// Member is, for a multilease, the lock whose end ended it (when the server said).
	Member string
	// Reason is the server's (expired, released, force_released, evicted, revoked, ...) or
	// ReasonUnrenewable, ReasonNotFound, ReasonRevoked (given up before the deadline).
	Reason string
	// At is when this client learned of the loss.
	At time.Time
	// Problem is the server's answer that said so (a 410 lease_lost), if one did.
	Problem *Problem
	// Cause is the last error of the heartbeats for ReasonUnrenewable; for ReasonRevoked
	// given up by the client, what the revocation asked.
	Cause error
	// Revocation is the operator's request to let go, when one came before the loss (it is
	// the cause of a ReasonRevoked loss).
	Revocation *Revocation

	givenUp bool // given up by this client before a revocation's deadline: Release gives it back
}

func (e *LostError) Error() string {
	s := fmt.Sprintf("leasehold: lease %s on %q lost (%s)", e.LeaseID, e.Lock, e.Reason)
	if e.Cause != nil {
		s += ": " + e.Cause.Error()
	}
	return s
}

// Is matches ErrLeaseLost.
func (e *LostError) Is(target error) bool { return target == ErrLeaseLost }

// Unwrap gives the server's problem, or the heartbeat's last error.
func (e *LostError) Unwrap() error {
	if e.Problem != nil {
		return e.Problem
	}
	return e.Cause
}

// errNoToken: the server granted a lease but its answer carried no token (cannot happen with
// a conforming server).
var errNoToken = errors.New("leasehold: the grant carried no token")
