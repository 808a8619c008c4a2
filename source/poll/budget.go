package poll

import (
	"context"
	"log/slog"
	"math"
	"sync"
	"time"
)

// Month is the length the projection and the budget are reckoned over.
const Month = 30 * 24 * time.Hour

// budget projects the monthly API spend from the client's call counter and,
// when a monthly budget is set, stretches every poll interval so that the
// projection fits under BudgetTarget of it.
//
// The rate is the counter's increase over the last BudgetWindow (sampled
// every BudgetTick) and the projection is that rate times 30 days: "at the
// current pace". The stretch factor is changed at most once per window (the
// rate needs a whole window to show the effect of a change): multiplied by
// projected/target, by at most ×4 up or ×½ down per step, within [1, 64].
// Detail calls follow new responses and cannot be stretched away; when the
// projection stays above the budget at the largest stretch, the warning
// says so.
type budget struct {
	monthly float64
	count   func() int64
	share   func() int64 // calls spent on list answers not believed (a part of count)
	now     func() time.Time
	window  time.Duration
	log     *slog.Logger
	m       *metrics

	mu        sync.Mutex
	samples   []sample
	stretch   float64
	projected float64 // -1 until a rate is known
	changed   time.Time
	warned    time.Time
}

type sample struct {
	t     time.Time
	n     int64
	share int64
}

const (
	budgetTarget = 0.9 // of the monthly budget: the projection aims below it
	warnAt       = 0.9 // the warning fires above this share of the budget
	maxStretch   = 64
)

func newBudget(monthly int64, count, share func() int64, now func() time.Time, window time.Duration, log *slog.Logger, m *metrics) *budget {
	b := &budget{monthly: float64(monthly), count: count, share: share, now: now, window: window, log: log, m: m, stretch: 1, projected: -1}
	m.budget.Set(float64(monthly))
	m.stretch.Set(1)
	return b
}

// factor is the current stretch of every interval (1: none).
func (b *budget) factor() float64 {
	if b == nil {
		return 1
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stretch
}

// Projection returns the projected monthly calls at the current pace and
// the stretch factor; projected is -1 while no rate is known yet.
func (b *budget) projection() (projected, stretch float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.projected, b.stretch
}

// run samples the counter every tick until ctx is done.
func (b *budget) run(ctx context.Context, tick time.Duration, after func(time.Duration) <-chan time.Time) error {
	b.tick()
	for {
		select {
		case <-after(tick):
			b.tick()
		case <-ctx.Done():
			return nil
		}
	}
}

func (b *budget) tick() {
	now, n, sh := b.now(), b.count(), b.share()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.samples = append(b.samples, sample{now, n, sh})
	// Keep one sample at or before the window's start.
	for len(b.samples) > 2 && now.Sub(b.samples[1].t) >= b.window {
		b.samples = b.samples[1:]
	}
	first := b.samples[0]
	span := now.Sub(first.t)
	if span < b.window/6 || span <= 0 {
		return // too little history for a rate
	}
	rate := float64(n-first.n) / span.Seconds()
	b.projected = rate * Month.Seconds()
	b.m.projected.Set(b.projected)
	b.m.projectedDistrust.Set(float64(sh-first.share) / span.Seconds() * Month.Seconds())
	if b.monthly <= 0 {
		return
	}
	if span >= b.window && (b.changed.IsZero() || now.Sub(b.changed) >= b.window) {
		ratio := b.projected / (budgetTarget * b.monthly)
		next := b.stretch * math.Min(math.Max(ratio, 0.5), 4)
		next = math.Min(math.Max(next, 1), maxStretch)
		if math.Abs(next-b.stretch) > 0.05*b.stretch {
			b.log.Info("poll intervals stretched to fit api.monthly_budget", "stretch", round2(next), "was", round2(b.stretch),
				"projected_monthly_calls", int64(b.projected), "monthly_budget", int64(b.monthly))
			b.stretch = next
			b.changed = now
			b.m.stretch.Set(next)
		}
	}
	if b.projected > warnAt*b.monthly && (b.warned.IsZero() || now.Sub(b.warned) >= time.Hour) {
		b.warned = now
		msg := "API calls at the current pace would use more than 90% of api.monthly_budget; polling is being stretched"
		if b.stretch >= maxStretch {
			msg = "API calls at the current pace would use more than 90% of api.monthly_budget even at the longest poll intervals (detail calls follow new responses); raise the budget or expect 402s"
		}
		b.log.Warn(msg, "projected_monthly_calls", int64(b.projected), "monthly_budget", int64(b.monthly), "stretch", round2(b.stretch))
	}
}

func round2(f float64) float64 { return math.Round(f*100) / 100 }
