package leasehold

import (
	"context"
	"time"
)

// Where a waiter stands in line, told to the caller while it waits (clients/PROTOCOL.md, "Why
// the wait"): a fair lock's ticket (LockOptions.OnQueued, a Queued) and a campaign's place
// (CampaignOnInLine, an InLine).

// InLine is where a campaign's candidate stands in line, as an answer in line tells it
// (CampaignOnInLine).
type InLine struct {
	// Position in line: 1 is next.
	Position int
	// Leader is who leads now (its Holder, Value and Term, ...); nil when nobody leads.
	Leader *LeaderInfo
	// EstimatedWait is the server's estimate of the wait until this candidate leads, from the
	// election's recent terms. It means something only when HasEstimate is true: the server
	// gives none until three terms have ended, and zero is an estimate like any other.
	EstimatedWait time.Duration
	HasEstimate   bool
}

// CampaignOnInLine is called while Campaign waits in line, with each answer in line (the
// campaign's own, then one per poll: at least every --max-wait-ms), never after the term is
// granted, from the goroutine that called Campaign: keep it quick. Should it panic, the line is
// left first, and the panic goes on up.
func CampaignOnInLine(f func(InLine)) CampaignOption {
	return func(c *campaignConfig) { c.onInLine = f }
}

// inLine is where the candidate stands, for CampaignOnInLine.
func (cand *candidateJSON) inLine() InLine {
	in := InLine{Position: cand.Position, Leader: cand.Leader}
	if cand.EstimatedWaitMs != nil {
		in.EstimatedWait, in.HasEstimate = duration(*cand.EstimatedWaitMs), true
	}
	return in
}

// tell calls the caller's hook (if any) with where a waiter stands. A hook that panics (or
// ends its goroutine) must not leave the place behind, holding up everyone after it until its
// TTL runs out: the line is left first, and the panic goes on up, as WithLock releases the
// lease when its fn panics.
func tell[T any](ctx context.Context, c *Client, hook func(T), where T, path, token string) {
	if hook == nil {
		return
	}
	told := false
	defer func() {
		if !told {
			c.leaveQueue(ctx, path, token)
		}
	}()
	hook(where)
	told = true
}
