package main

import (
	"testing"
	"time"

	"github.com/surveysync/surveysync/internal/testkit/zktest"
	"github.com/surveysync/surveysync/sim"
)

// With ha, only the leader verifies: the follower's passes stay at 0
// while the leader's count; once the leader is killed, the other daemon
// leads and verifies.
func TestHAVerificationRunsOnTheLeaderOnly(t *testing.T) {
	zk := zktest.Addr(t)
	w := clickhouseOrSkip(t)
	e := newEmulator(t, sim.Options{Surveys: specs(1, 200, 53)})
	ds := haPair(t, e, w, zk, zktest.Root(t), 4*time.Second,
		"sync:\n  poll_interval: 1s\n  settle_lag: 0s\n  reconcile_interval: 0s\nverify:\n  interval: 1s\n")
	for _, d := range ds {
		d.proc = startDaemon(t, d.cfg)
	}
	passes := func(d *haDaemon) float64 {
		v, err := metricSum(d.metrics, "surveysync_verify_passes_total")
		if err != nil {
			return -1
		}
		return v
	}
	leader := leaderOf(t, ds, 30*time.Second)
	follower := ds[0]
	if follower == leader {
		follower = ds[1]
	}
	deadline := time.Now().Add(60 * time.Second)
	for passes(leader) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("the leader verified %v times in 60 s\n%s", passes(leader), tail(leader.proc.output(), 30))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if v := passes(follower); v != 0 {
		t.Fatalf("the follower counts %v verification passes, want 0", v)
	}
	if v, err := metricSum(leader.metrics, "surveysync_verify_passes_total", `result="clean"`); err != nil || v < 3 {
		t.Errorf("the leader's clean passes: %v, %v", v, err)
	}
	leader.kill(t)
	if l := leaderOf(t, ds, 20*time.Second); l != follower {
		t.Fatalf("%s leads, want %s", l.name, follower.name)
	}
	deadline = time.Now().Add(60 * time.Second)
	for passes(follower) < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the new leader did not verify in 60 s\n%s", tail(follower.proc.output(), 30))
		}
		time.Sleep(100 * time.Millisecond)
	}
}
