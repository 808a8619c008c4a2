package poll

import "time"

// Defaults of zero Options fields that config also defaults (sync.*).
const (
	DefaultPollInterval          = 30 * time.Second
	DefaultOverlap               = 10 * time.Minute
	DefaultPartialLookback       = 72 * time.Hour
	DefaultPartialRescanInterval = 10 * time.Minute
	// DefaultReconcileInterval: a day since issue 34, the daemon's
	// verification finding what changes counts every hour
	// (docs/architecture.md, "Why reconcile every 24 h").
	DefaultReconcileInterval = 24 * time.Hour
)

// DefaultBackfillFrom is Options.BackfillFrom's default (sync.backfill_from):
// 2000-01-01 UTC, before any survey of the service.
func DefaultBackfillFrom() time.Time { return time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC) }
