package leasehold

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Signals before the loss (clients/PROTOCOL.md, "Signals before the loss"): the lease watch
// tells, while the lease holds, what its holder may act on (expiring, renewed, degraded,
// recovered, contended, revocation_requested); Lease.Signals hands each on. A revocation
// moves the lease's end: it is given up as lost (ReasonRevoked) before its deadline.

// The kinds of Signal (the watch's event names; a later server may tell others, handed on
// with their name).
const (
	// SignalExpiring: less than the watch's slack is left and no heartbeat came since
	// (Remaining, ValidUntil): the keeper is renewing; should it fail, stop before ValidUntil.
	SignalExpiring = "expiring"
	// SignalRenewed: a heartbeat after SignalExpiring extended the lease (ValidUntil).
	SignalRenewed = "renewed"
	// SignalDegraded: the instance serving the watch cannot reach Redis (Since, ValidUntil):
	// the lease may still stand, but nothing can confirm or renew it.
	SignalDegraded = "degraded"
	// SignalRecovered: Redis answers again; the lease still holds (ValidUntil).
	SignalRecovered = "recovered"
	// SignalContended: how many requests wait for the name now (Waiters; 0: nobody any more).
	SignalContended = "contended"
	// SignalRevocationRequested: an operator asked the holder to let go by Revocation.Deadline
	// (Revoke). The lease is given up as lost (ReasonRevoked) a margin before it, unless
	// released first.
	SignalRevocationRequested = "revocation_requested"
)

// Signal is one thing the lease's watch told while the lease held (see the Signal... kinds).
// Fields a kind does not carry are zero.
type Signal struct {
	// Kind is SignalExpiring, SignalRenewed, SignalDegraded, SignalRecovered,
	// SignalContended or SignalRevocationRequested.
	Kind string
	// ID is the watch event's id ("" for a revocation a heartbeat answer told first).
	ID string
	// Lock is the lock the server named (an election's: "election/<name>").
	Lock string
	// Remaining is what was left of the lease when SignalExpiring was told.
	Remaining time.Duration
	// ValidUntil is until when the lease surely holds (expiring, renewed, degraded,
	// recovered).
	ValidUntil time.Time
	// Since is when the instance lost Redis (degraded).
	Since time.Time
	// Waiters is how many requests wait for the name (contended).
	Waiters int
	// Revocation is the operator's request (revocation_requested).
	Revocation *Revocation
}

// Revocation is an operator's request that a lease's holder let go (Revoke): release before
// Deadline; the server ends the lease then (lost, reason revoked).
type Revocation struct {
	Reason      string    `json:"reason"`
	RequestedBy string    `json:"requested_by"` // the admin key's name, or "admin token"
	RequestedAt time.Time `json:"requested_at"`
	Deadline    time.Time `json:"deadline"`
}

// ReasonRevoked is a LostError's Reason when an operator revoked the lease (Revoke): told by
// the server at the deadline, or given up by the client a margin before it (then
// LostError.Revocation says who asked and why).
const ReasonRevoked = "revoked"

// signalBufferSize is how many signals Lease.Signals keeps unread before dropping the oldest.
const signalBufferSize = 32

type signalJSON struct {
	Lock        string      `json:"lock"`
	RemainingMs int64       `json:"remaining_ms"`
	ValidUntil  string      `json:"valid_until"`
	Since       string      `json:"since"`
	Waiters     int         `json:"waiters"`
	Revocation  *Revocation `json:"revocation"`
}

func parseTime(s string) time.Time {
	t, _ := time.Parse(time.RFC3339Nano, s)
	return t
}

// Signals hands on every signal the lease's watch tells (see Signal), in order. It is
// buffered: when nobody reads, the oldest unread signal is dropped, so the keeper never
// waits. It is closed when the lease is over (lost or released). A revocation is handed on
// once (a reopened watch, or a heartbeat answer, tells it again; it never changes). A
// multilease's watch tells each member's signals, Signal.Lock naming the member; without the
// watch (WithoutWatch), only the revocations a heartbeat answer carries come (a multilease's:
// each revoked member's).
func (l *Lease) Signals() <-chan Signal { return l.signals }

// Revocation is the operator's request to let go (nil until one came, by the watch or a
// heartbeat answer). The lease is then given up as lost (ReasonRevoked) a margin before
// its Deadline, unless released first: finish or stop, and Release. A multilease whose
// members are revoked keeps the one with the earliest deadline (of equal ones, the first
// told): the one that ends it; each member shows its own (Members).
func (l *Lease) Revocation() *Revocation {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.revocation == nil {
		return nil
	}
	r := *l.revocation
	return &r
}

// RevocationRequested is closed when an operator asks the holder to let go (Revocation then
// says by when).
func (l *Lease) RevocationRequested() <-chan struct{} { return l.revoked }

// emit hands s on, dropping the oldest unread signal when the buffer is full.
func (l *Lease) emit(s Signal) {
	l.sigMu.Lock()
	defer l.sigMu.Unlock()
	if l.sigClosed {
		return
	}
	for {
		select {
		case l.signals <- s:
			return
		default:
		}
		select {
		case <-l.signals:
		default:
		}
	}
}

func (l *Lease) closeSignals() {
	l.sigMu.Lock()
	defer l.sigMu.Unlock()
	if !l.sigClosed {
		l.sigClosed = true
		close(l.signals)
	}
}

// onWatchEvent hands on one of the watch's events other than lost.
func (l *Lease) onWatchEvent(kind, id, data string) {
	var ev signalJSON
	_ = json.Unmarshal([]byte(data), &ev)
	s := Signal{Kind: kind, ID: id, Lock: ev.Lock, Remaining: time.Duration(ev.RemainingMs) * time.Millisecond,
		ValidUntil: parseTime(ev.ValidUntil), Since: parseTime(ev.Since), Waiters: ev.Waiters, Revocation: ev.Revocation}
	if kind == SignalRevocationRequested {
		if ev.Revocation != nil {
			l.noteRevocation(ev.Revocation, s)
		}
		return
	}
	l.emit(s)
}

// noteRevocation hands a revocation on as a signal, once (a reopened watch or a heartbeat
// tells it again: it is never put off), shows it on its member, and keeps the one with the
// earliest deadline (of equal ones, the first told): the lease's end moves to its deadline
// less the loss margin. One told later with a later deadline (another member's) changes
// nothing but its member.
func (l *Lease) noteRevocation(r *Revocation, s Signal) {
	l.mu.Lock()
	key := s.Lock + " " + r.Deadline.Format(time.RFC3339Nano)
	if l.over || l.lostErr != nil || l.told[key] {
		l.mu.Unlock()
		return
	}
	if l.told == nil {
		l.told = map[string]bool{}
	}
	l.told[key] = true
	rc := *r
	for i, m := range l.members {
		if m.Lock == s.Lock && m.Revocation == nil {
			r := rc
			l.members[i].Revocation = &r
		}
	}
	if l.revocation == nil {
		close(l.revoked)
	}
	if l.revocation == nil || endsBefore(rc, *l.revocation) {
		l.revocation, l.revokedMember = &rc, s.Lock
		if l.revokeTimer != nil {
			l.revokeTimer.Stop()
		}
		if !rc.Deadline.IsZero() {
			l.revokeTimer = time.AfterFunc(time.Until(rc.Deadline.Add(-lossMargin(l.ttl))), l.giveUpRevoked)
		}
	}
	l.mu.Unlock()
	s.Kind, s.Revocation = SignalRevocationRequested, &rc
	l.emit(s)
}

// endsBefore: a's deadline is earlier than b's (a deadline that did not parse is no earlier).
func endsBefore(a, b Revocation) bool {
	return !a.Deadline.IsZero() && (b.Deadline.IsZero() || a.Deadline.Before(b.Deadline))
}

// giveUpRevoked gives the lease up as lost at its revocation's deadline less the margin,
// unless it was released first (a release under way is waited for). A multilease's loss
// names the member whose revocation ended it (LostError.Member).
func (l *Lease) giveUpRevoked() {
	l.mu.Lock()
	if l.over || l.lostErr != nil {
		l.mu.Unlock()
		return
	}
	if l.releasing {
		l.revokeTimer = time.AfterFunc(20*time.Millisecond, l.giveUpRevoked)
		l.mu.Unlock()
		return
	}
	r := *l.revocation
	margin := lossMargin(l.ttl)
	var member, whose string
	if l.place.shape == shapeMultilease {
		member, whose = l.revokedMember, fmt.Sprintf("member %q ", l.revokedMember)
	}
	l.mu.Unlock()
	l.markLost(&LostError{Reason: ReasonRevoked, Member: member, Revocation: &r, givenUp: true,
		Cause: fmt.Errorf("%srevoked by %s (reason %q): given up %v before its deadline %s, not released by then",
			whose, r.RequestedBy, r.Reason, margin, r.Deadline.Format(time.RFC3339Nano))})
}

// RevokeOption configures Revoke.
type RevokeOption func(*revokeBody)

// RevokeReason says why, for the holder (Revocation.Reason), the lock's history and the
// audit log.
func RevokeReason(reason string) RevokeOption { return func(b *revokeBody) { b.Reason = reason } }

// RevokeLease asks only the lease leaseID (without it, every lease holding the name).
func RevokeLease(leaseID string) RevokeOption { return func(b *revokeBody) { b.LeaseID = leaseID } }

type revokeBody struct {
	GraceMs int64  `json:"grace_ms"`
	Reason  string `json:"reason,omitempty"`
	LeaseID string `json:"lease_id,omitempty"`
}

// RevokeResult is the answer of Revoke: each lease asked.
type RevokeResult struct {
	Lock   string         `json:"lock"`
	Leases []RevokedLease `json:"leases"`
}

// RevokedLease is one lease Revoke asked to let go.
type RevokedLease struct {
	LeaseID      string     `json:"lease_id"`
	Holder       string     `json:"holder"`
	FencingToken int64      `json:"fencing_token"`
	Revocation   Revocation `json:"revocation"`
	// Again: the lease had been asked already; its first deadline and reason stand.
	Again bool `json:"again"`
}

// Revoke asks the holders of lock name (or, with RevokeLease, one lease) to let go within
// grace (at most an hour), an operator's action that needs the admin token or an admin key
// (WithAPIKey): each holder's watch tells SignalRevocationRequested, its heartbeats extend
// the lease no further than the deadline, and at the deadline the server ends the lease
// (lost, reason revoked). A Go holder gives it up a margin before (ReasonRevoked).
//
// Nobody holds the name: a *Problem with Code CodeLockNotFound (CodeLeaseNotFound for a
// lease named that does not hold it). Not retried, as ForceRelease: a retry after the lease
// ended could ask the next holder.
func (c *Client) Revoke(ctx context.Context, name string, grace time.Duration, opts ...RevokeOption) (*RevokeResult, error) {
	body := &revokeBody{GraceMs: ms(grace)}
	for _, o := range opts {
		o(body)
	}
	resp, err := c.do(ctx, &request{method: http.MethodPost, path: "/v1/admin/locks/" + url.PathEscape(name) + "/revoke", body: body})
	if err != nil {
		return nil, err
	}
	var r RevokeResult
	if err := decode(resp, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// watchQuery is the watch's query, on every opening (a reopening with Last-Event-ID too): the
// lease's expiring slack (LockOptions.ExpiringSlack, else WithExpiringSlack), when set. A
// multilease's watch tells expiring per member, by the same slack.
func (l *Lease) watchQuery() url.Values {
	if l.slack <= 0 {
		return nil
	}
	return url.Values{"expiring_slack_ms": {strconv.FormatInt(ms(l.slack), 10)}}
}
