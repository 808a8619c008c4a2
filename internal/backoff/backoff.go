// Package backoff is surveysync's one retry schedule: the wait after the
// n-th failure of something, growing exponentially from an initial wait to
// a ceiling, with equal jitter (between half the step and the whole step),
// and a context-aware sleep.
//
// It is a function of the attempt number rather than a stateful iterator
// (as github.com/cenkalti/backoff's is) because most of its callers keep
// the attempt count in durable state (a webhook event's retries, a file's
// copy attempts, a stream's distrust count) and must compute the wait
// again after a restart; see docs/architecture.md, "Errors and retries".
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Policy is an exponential schedule: Initial after the first failure,
// doubling after each further one, never more than Max. The zero Max means
// no ceiling other than overflow.
type Policy struct {
	Initial time.Duration
	Max     time.Duration
}

// Step is the un-jittered wait after the n-th consecutive failure (n ≥ 1;
// n < 1 counts as 1): Initial·2^(n-1), capped at Max.
func (p Policy) Step(n int) time.Duration {
	d := p.Initial
	if d <= 0 {
		return 0
	}
	for i := 1; i < n; i++ {
		if p.Max > 0 && d >= p.Max {
			break
		}
		if d > time.Duration(1<<62)/2 {
			break
		}
		d *= 2
	}
	if p.Max > 0 && d > p.Max {
		d = p.Max
	}
	return d
}

// Delay is Step(n) with equal jitter: uniform in [Step/2, Step], so
// callers that fail together spread out while every caller still waits at
// least half the step (a rate-limited client really slows down).
func (p Policy) Delay(n int) time.Duration {
	return Jitter(p.Step(n))
}

// Jitter spreads d uniformly over [d/2, d].
func Jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}

// Sleep waits d or until ctx ends, whichever is first; it returns ctx's
// error in the second case. A d ≤ 0 returns at once (nil unless ctx is
// already done).
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
