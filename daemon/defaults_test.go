package daemon

import (
	"testing"
	"time"
)

// The components' defaults and config's agree: config/defaults_test.go.

// sync.reconcile_interval: 0 disables reconcile (poll's own zero means its
// default, 6 h).
func TestReconcileIntervalZeroDisables(t *testing.T) {
	if got := reconcileInterval(0); got >= 0 {
		t.Fatalf("reconcile_interval 0 → %v, want a negative (disabled) interval", got)
	}
	if got := reconcileInterval(time.Hour); got != time.Hour {
		t.Fatalf("reconcile_interval 1h → %v", got)
	}
}
