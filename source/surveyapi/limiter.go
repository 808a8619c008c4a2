package surveyapi

import (
	"container/list"
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// adaptiveLimit is a FIFO semaphore whose limit follows AIMD: it starts at
// the configured maximum, halves on a 429 (at most once per round trip:
// a 429 to a request sent before the last decrease does not count again),
// and grows by 1/limit per success (about +1 per limit successes) back to
// the maximum. The effective number of slots is floor(limit), at least 1.
type adaptiveLimit struct {
	mu           sync.Mutex
	max          float64
	limit        float64
	inFlight     int
	waiters      list.List // of chan struct{}; closed when granted a slot
	lastDecrease time.Time
	below        atomic.Bool // limit < max: successes have something to do
}

func newAdaptiveLimit(max int) *adaptiveLimit {
	return &adaptiveLimit{max: float64(max), limit: float64(max)}
}

func (a *adaptiveLimit) slots() int { return max(1, int(a.limit)) }

// acquire takes a slot, waiting in FIFO order; it returns ctx's error if ctx
// ends first (holding no slot then).
func (a *adaptiveLimit) acquire(ctx context.Context) error {
	a.mu.Lock()
	if a.inFlight < a.slots() && a.waiters.Len() == 0 {
		a.inFlight++
		a.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	el := a.waiters.PushBack(ch)
	a.mu.Unlock()

	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		a.mu.Lock()
		select {
		case <-ch: // granted while we were giving up: hand the slot on
			a.inFlight--
			a.grantLocked()
		default:
			a.waiters.Remove(el)
		}
		a.mu.Unlock()
		return ctx.Err()
	}
}

func (a *adaptiveLimit) release() {
	a.mu.Lock()
	a.inFlight--
	a.grantLocked()
	a.mu.Unlock()
}

func (a *adaptiveLimit) grantLocked() {
	for a.inFlight < a.slots() && a.waiters.Len() > 0 {
		ch := a.waiters.Remove(a.waiters.Front()).(chan struct{})
		a.inFlight++
		close(ch)
	}
}

// success is the additive increase.
func (a *adaptiveLimit) success() {
	if !a.below.Load() {
		return
	}
	a.mu.Lock()
	if a.limit < a.max {
		a.limit = min(a.max, a.limit+1/a.limit)
		a.grantLocked()
	}
	a.below.Store(a.limit < a.max)
	a.mu.Unlock()
}

// rateLimited is the multiplicative decrease, for a 429 to a request sent at sentAt.
func (a *adaptiveLimit) rateLimited(sentAt, now time.Time) {
	a.mu.Lock()
	if !sentAt.Before(a.lastDecrease) {
		a.limit = max(1, a.limit/2)
		a.lastDecrease = now
		a.below.Store(a.limit < a.max)
	}
	a.mu.Unlock()
}

func (a *adaptiveLimit) snapshot() (limit, inFlight int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.slots(), a.inFlight
}

// gate modes.
const (
	modeOpen         = iota
	modePaused       // 402: every call waits until `until`, then one probe goes first
	modeUnauthorized // 401: every call fails fast; one probe per probe interval
)

// gate is the process-wide admission check in front of every request: the
// shared "not before" instant set by 429s, the 402 pause, and the 401 stop.
type gate struct {
	quotaPause    time.Duration
	probeInterval time.Duration
	onMode        func(mode int) // called with mu held, on every mode change

	// Lock-free fast path: open is true while mode is modeOpen; holdNs is
	// notBefore in unix ns. Both only change under mu.
	open   atomic.Bool
	holdNs atomic.Int64

	mu        sync.Mutex
	changed   chan struct{} // closed and replaced on every mode change
	notBefore time.Time
	mode      int
	until     time.Time // paused: end of the pause; unauthorized: earliest next probe
	probing   bool
	authErr   error // the last 401, while unauthorized
	authSince time.Time
}

func newGate(quotaPause, probeInterval time.Duration, onMode func(mode int)) *gate {
	g := &gate{quotaPause: quotaPause, probeInterval: probeInterval, onMode: onMode, changed: make(chan struct{})}
	g.open.Store(true)
	onMode(modeOpen)
	return g
}

// admit waits until a request may be sent: past the 429 gate, and not in a
// 402 pause. While unauthorized it returns refuse() at once, except for one
// probe per probe interval. probe reports whether the caller's request is
// the probe: it must then call done with what it learnt. waited is the time
// spent behind the 429 gate.
func (g *gate) admit(ctx context.Context, refuse func(authErr error, since, next time.Time) error) (probe bool, waited time.Duration, err error) {
	if g.open.Load() && time.Now().UnixNano() >= g.holdNs.Load() {
		return false, 0, nil // the common case: no lock
	}
	for {
		g.mu.Lock()
		now := time.Now()
		var wait time.Duration
		gated := false
		switch {
		case g.mode == modeUnauthorized:
			if g.probing || now.Before(g.until) {
				err := refuse(g.authErr, g.authSince, g.until)
				g.mu.Unlock()
				return false, waited, err
			}
			g.probing = true
			g.until = now.Add(g.probeInterval)
			g.mu.Unlock()
			return true, waited, nil
		case now.Before(g.notBefore):
			wait, gated = g.notBefore.Sub(now), true
		case g.mode == modePaused && g.probing:
			wait = time.Hour // until the probe reports (changed is closed)
		case g.mode == modePaused && now.Before(g.until):
			wait = g.until.Sub(now)
		case g.mode == modePaused:
			g.probing = true
			g.mu.Unlock()
			return true, waited, nil
		default:
			g.mu.Unlock()
			return false, waited, nil
		}
		changed := g.changed
		g.mu.Unlock()

		t := time.NewTimer(wait)
		start := time.Now()
		select {
		case <-t.C:
		case <-changed:
		case <-ctx.Done():
		}
		t.Stop()
		if gated {
			waited += time.Since(start)
		}
		if err := ctx.Err(); err != nil {
			return false, waited, err
		}
	}
}

// result of one attempt, as the gate sees it.
const (
	gateNoAnswer = iota // network error, timeout, cancelled, 429, 5xx: learnt nothing about the token or quota
	gateAnswered        // 2xx or a 4xx other than 401, 402 and 429
	gate401
	gate402
)

// done reports the result of an admitted attempt.
func (g *gate) done(probe bool, result int, authErr error) (entered int, wasMode int) {
	if !probe && (result == gateAnswered || result == gateNoAnswer) {
		return -1, -1 // nothing to learn: no lock
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	wasMode = g.mode
	entered = -1
	if probe {
		g.probing = false
	}
	switch result {
	case gate401:
		if g.mode != modeUnauthorized {
			g.authSince = now
			entered = modeUnauthorized
		}
		g.mode, g.authErr = modeUnauthorized, authErr
		g.until = now.Add(g.probeInterval)
	case gate402:
		if g.mode == modeUnauthorized {
			break // a 402 proves nothing about the token; keep failing fast
		}
		if g.mode != modePaused {
			entered = modePaused
		}
		g.mode = modePaused
		if u := now.Add(g.quotaPause); u.After(g.until) {
			g.until = u
		}
	case gateAnswered:
		if probe && g.mode != modeOpen {
			g.mode, g.authErr = modeOpen, nil
			entered = modeOpen
		}
	}
	g.open.Store(g.mode == modeOpen)
	if entered >= 0 || probe {
		g.onMode(g.mode)
		close(g.changed)
		g.changed = make(chan struct{})
	}
	return entered, wasMode
}

// holdUntil extends the shared 429 gate: nobody sends before t.
func (g *gate) holdUntil(t time.Time) {
	g.mu.Lock()
	if t.After(g.notBefore) {
		g.notBefore = t
		g.holdNs.Store(t.UnixNano())
	}
	g.mu.Unlock()
}

type gateState struct {
	mode      int
	until     time.Time
	notBefore time.Time
	authErr   error
	authSince time.Time
}

func (g *gate) state() gateState {
	g.mu.Lock()
	defer g.mu.Unlock()
	return gateState{mode: g.mode, until: g.until, notBefore: g.notBefore, authErr: g.authErr, authSince: g.authSince}
}
