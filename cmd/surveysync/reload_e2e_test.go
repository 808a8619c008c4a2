package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/surveysync/surveysync/daemon"
	"github.com/surveysync/surveysync/sim"
	"github.com/surveysync/surveysync/survey"
)

// A SIGHUP reload adds a survey, which gets synced, and excludes another,
// whose webhooks are then acknowledged and dropped; an invalid
// configuration is refused with a log line and the daemon runs on.
func TestReloadAddsSurveyAndExcludesAnother(t *testing.T) {
	w := clickhouseOrSkip(t)
	hookPort, metricsPort := freePort(t), freePort(t)
	path := "/hooks/e2e-" + randHex(12)
	e := newEmulator(t, sim.Options{Surveys: specs(3, 100, 61),
		WebhookURL: fmt.Sprintf("http://127.0.0.1:%d%s", hookPort, path), WebhookSchedule: []time.Duration{0, 200 * time.Millisecond, time.Second}})
	all := e.ids
	e.ids = all[:1] // configured: the first survey only
	cfg := writeConfig(t, e, w, fmt.Sprintf("sync:\n  poll_interval: 1s\n  settle_lag: 0s\n  reconcile_interval: 0s\n  batch:\n    max_delay: 100ms\n"+
		"webhooks:\n  enabled: true\n  listen: 127.0.0.1:%d\n  path: %s\n  spool_dir: %s\n", hookPort, path, t.TempDir()))
	rewriteConfig(t, cfg, map[string]string{"metrics:\n  listen: \"\"\n": fmt.Sprintf("metrics:\n  listen: 127.0.0.1:%d\n", metricsPort)})
	d := startDaemon(t, cfg)
	waitConverged(t, e, w, 60*time.Second)

	surveysLine := fmt.Sprintf("surveys: [%d]\n", all[0])
	rewriteConfig(t, cfg, map[string]string{surveysLine: fmt.Sprintf("surveys: [%d, %d]\nsurveys_exclude: [%d]\n", all[0], all[1], all[2])})
	if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	e.ids = all[:2]
	waitConverged(t, e, w, 60*time.Second)
	if !strings.Contains(d.output(), "configuration reloaded") {
		t.Fatalf("no reload line:\n%s", tail(d.output(), 20))
	}

	// The excluded survey's webhook is acknowledged and dropped.
	now := time.Now().UTC().Add(-2 * time.Minute)
	if _, err := e.sim.AddResponse(all[2], survey.Response{ResponseStatus: survey.StatusCompleted,
		DateCreated: survey.Time{Time: now.Add(-10 * time.Minute)}, DateCompleted: survey.TimeOf(now)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, func() bool {
		return strings.Contains(d.output(), "webhook event of an excluded survey acknowledged and dropped")
	})
	m, err := daemon.Scrape(context.Background(), fmt.Sprintf("127.0.0.1:%d", metricsPort), `surveysync_webhook_events_excluded_total{event="response_received"}`)
	if err != nil || m[`surveysync_webhook_events_excluded_total{event="response_received"}`] != 1 {
		t.Fatalf("excluded events metric: %v (%v)", m, err)
	}
	time.Sleep(2 * time.Second) // a poll interval: nothing of it may arrive
	if msg := diff(truthFingerprints(e), warehouseFingerprints(t, w)); msg != "" {
		t.Fatal("with the third survey excluded: " + msg)
	}

	// A feed added by reload runs: a CSV dropped into its folder reaches
	// the service as contacts.
	feedDir := t.TempDir()
	did := all[0]*10 + 1
	f, err := os.OpenFile(cfg, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = fmt.Fprintf(f, "feeds:\n  - name: crm\n    type: csv_dir\n    distribution_id: %d\n    interval: 1s\n    mapping: {email: email}\n    csv_dir: {dir: %s}\n", did, feedDir)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool { return strings.Contains(d.output(), "feeds: restarted with the reloaded configuration") })
	if err := os.WriteFile(filepath.Join(feedDir, "a.csv"), []byte("email\nann@example.com\nbob@example.com\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, func() bool { return len(e.sim.Contacts(did)) == 2 })

	// An invalid configuration is refused; the daemon runs on.
	rewriteConfig(t, cfg, map[string]string{fmt.Sprintf("surveys_exclude: [%d]\n", all[2]): "surveys_exclude: [-7]\n"})
	if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool { return strings.Contains(d.output(), "configuration reload refused") })
	if !strings.Contains(d.output(), "surveys_exclude[0]") {
		t.Fatalf("the refusal does not name the key:\n%s", tail(d.output(), 10))
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	d.wait(t, 30*time.Second)
}
