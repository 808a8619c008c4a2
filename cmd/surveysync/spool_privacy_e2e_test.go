package main

// Privacy reaches the webhook spool (issue 32, item 5), through the real
// binary: with privacy.fields.contact_id: hash and responses erased by id
// (beside the running daemon on ClickHouse, with it stopped on Parquet),
// by contact and deleted at the service (sync.erase_deleted), a byte search
// of every file under the data and spool directories finds neither a
// contact id in clear nor an erased response's id (but in the erasures
// audit log). One test per sink.

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/surveysync/surveysync/config"
	"github.com/surveysync/surveysync/sim"
	"github.com/surveysync/surveysync/sink/parquet"
	"github.com/surveysync/surveysync/survey"
)

func TestSpoolPrivacyParquet(t *testing.T) { spoolPrivacy(t, nil) }

func TestSpoolPrivacyClickHouse(t *testing.T) { spoolPrivacy(t, clickhouseOrSkip(t)) }

func spoolPrivacy(t *testing.T, w *testWarehouse) {
	const sid = 123
	spoolDir := t.TempDir()
	port, path := freePort(t), "/hooks/e2e-"+randHex(8)
	e := newEmulator(t, sim.Options{Surveys: []sim.SurveySpec{{ID: sid, Responses: 5, Seed: 3}},
		WebhookURL: fmt.Sprintf("http://127.0.0.1:%d%s", port, path), WebhookSchedule: []time.Duration{0, 200 * time.Millisecond, time.Second, 2 * time.Second}})
	keyFile := filepath.Join(t.TempDir(), "hash.key")
	if err := os.WriteFile(keyFile, []byte(privKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	metrics := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cfgPath := writeConfig(t, e, w, fmt.Sprintf(`sync:
  poll_interval: 1s
  settle_lag: 0s
  reconcile_interval: 1s
  erase_deleted: true
privacy:
  hash_key_file: %s
  fields:
    contact_id: hash
webhooks:
  enabled: true
  listen: 127.0.0.1:%d
  path: %s
  spool_dir: %s
`, keyFile, port, path, spoolDir))
	// The events left waiting (their details answer 503) must not hold
	// each stop for the whole drain.
	rewriteConfig(t, cfgPath, map[string]string{"metrics:\n  listen: \"\"\n": "metrics:\n  listen: " + metrics + "\nshutdown:\n  drain_timeout: 2s\n",
		"max_retries: 10": "max_retries: 1"})
	cfg, err := config.Load(cfgPath, nil, nil)
	if err != nil {
		t.Fatal(err)
	}

	t0 := time.Now()
	d := startDaemon(t, cfgPath)
	waitReadyz(t, d, metrics, http.StatusOK, "ready", 90*time.Second)
	// Four responses by email (their webhooks carry the contact id). The
	// second and third are processed (their bodies then sit in free
	// pages); the details of the first and the last answer 503, so their
	// events stay waiting in the spool (live pages).
	contacts := []int64{918273601, 918273602, 918273603, 918273604}
	ids := []survey.GUID{"5b1e7a00-0000-4000-8000-000000000001", "5b1e7a00-0000-4000-8000-000000000002",
		"5b1e7a00-0000-4000-8000-000000000003", "5b1e7a00-0000-4000-8000-000000000004"}
	variants := func(id survey.GUID) []string {
		return []string{strings.ToLower(string(id)), strings.ToUpper(string(id))}
	}
	now := time.Now().UTC().Add(-2 * time.Minute)
	add := func(i int) {
		t.Helper()
		if _, err := e.sim.AddResponse(sid, survey.Response{ResponseID: ids[i], ResponseStatus: survey.StatusCompleted, ContactID: ptrTo(contacts[i]), DistributionID: ptrTo(int64(sid*10 + 2)),
			DateCreated: survey.Time{Time: now.Add(-10 * time.Minute)}, DateCompleted: survey.TimeOf(now)}); err != nil {
			t.Fatal(err)
		}
	}
	delivered := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			got := 0
			for _, dl := range e.sim.WebhookDeliveries() {
				if dl.Delivered && strings.Contains(string(dl.Body), `"contact_id":9182736`) {
					got++
				}
			}
			if got == n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d of the %d webhooks with a contact id delivered; output:\n%s", got, n, tail(d.output(), 30))
			}
		}
	}
	add(1)
	add(2)
	delivered(2)
	inOutput := func(id survey.GUID) bool {
		if w == nil {
			cur, err := parquet.ReadCurrent(context.Background(), cfg.Parquet.Dir, 0)
			return err == nil && cur.Responses[strings.ToLower(string(id))] != nil
		}
		var n uint64
		q := fmt.Sprintf("SELECT count() FROM %s.responses_current WHERE response_id = toUUID('%s')", w.db, id)
		return w.conn.QueryRow(context.Background(), q).Scan(&n) == nil && n == 1
	}
	for deadline := time.Now().Add(60 * time.Second); !inOutput(ids[1]) || !inOutput(ids[2]); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the responses did not reach the output; output:\n%s", tail(d.output(), 30))
		}
	}
	t.Logf("%v: 2 responses in the output", time.Since(t0))
	// Deleted at the service, erased by the daemon (sync.erase_deleted):
	// the running receiver rewrites the spool's file without it.
	if err := e.sim.DeleteResponse(sid, ids[2]); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(60 * time.Second); len(grepTree(t, spoolDir, variants(ids[2]))) > 0; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the response deleted at the service is still in the spool 60 s later: %v; output:\n%s", grepTree(t, spoolDir, variants(ids[2])), tail(d.output(), 40))
		}
	}
	for _, i := range []int{0, 3} {
		if err := e.sim.InjectFault(sim.Fault{Op: sim.OpGetResponse, Kind: "503", Survey: sid, Response: string(ids[i])}); err != nil {
			t.Fatal(err)
		}
		add(i)
	}
	delivered(4)
	t.Logf("%v: 4 webhooks spooled", time.Since(t0))
	if w != nil {
		// ClickHouse: erased on request while the daemon runs; the daemon
		// finds the tombstone at its next refresh (10 s) and deletes the
		// waiting event from its spool.
		if len(grepTree(t, spoolDir, variants(ids[0]))) == 0 {
			t.Fatal("the waiting event is not in the spool: the test proves nothing")
		}
		runErase(t, cfgPath, "--survey", fmt.Sprint(sid), "--response", string(ids[0]))
		for deadline := time.Now().Add(45 * time.Second); len(grepTree(t, spoolDir, variants(ids[0]))) > 0; time.Sleep(200 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the response erased beside the running daemon is still in its spool 45 s later; output:\n%s", tail(d.output(), 30))
			}
		}
		t.Logf("%v: erased beside the running daemon, gone from its spool", time.Since(t0))
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	d.wait(t, time.Minute)

	t.Logf("%v: stopped", time.Since(t0))
	// Erased on request with the daemon stopped: by id (Parquet), by
	// contact.
	if w == nil {
		runErase(t, cfgPath, "--survey", fmt.Sprint(sid), "--response", string(ids[0]))
	}
	runErase(t, cfgPath, "--contact", fmt.Sprint(contacts[1]))
	d = startDaemon(t, cfgPath)
	waitReadyz(t, d, metrics, http.StatusOK, "ready", 90*time.Second)
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	d.wait(t, time.Minute)

	t.Logf("%v: started and stopped again", time.Since(t0))
	var clear, erased []string
	for _, c := range contacts {
		clear = append(clear, fmt.Sprint(c))
	}
	for _, id := range ids[:3] {
		erased = append(erased, variants(id)...)
	}
	for _, dir := range []string{cfg.Parquet.Dir, spoolDir} {
		if hits := grepTree(t, dir, clear); len(hits) > 0 {
			t.Errorf("contact ids in clear:\n%s", strings.Join(hits, "\n"))
		}
		for _, h := range grepTree(t, dir, erased) {
			if !strings.Contains(h, filepath.Join("_state", "erasures.jsonl")) {
				t.Errorf("an erased response's id: %s", h)
			}
		}
	}
	// The test proves something: the event of the response kept, still
	// waiting, is in the spool, with its contact's hash.
	if len(grepTree(t, spoolDir, variants(ids[3]))) == 0 || len(grepTree(t, spoolDir, []string{hmacHex(fmt.Sprint(contacts[3]))})) == 0 {
		t.Error("the waiting event of the kept response, or its contact_id_hash, is not in the spool")
	}
	if w != nil {
		var n uint64
		q := fmt.Sprintf("SELECT count() FROM %s.responses_current WHERE contact_id_hash = '%s'", w.db, hmacHex(fmt.Sprint(contacts[2])))
		if err := w.conn.QueryRow(context.Background(), q).Scan(&n); err != nil || n != 0 {
			t.Errorf("the response deleted at the service: %d rows (%v)", n, err)
		}
	}
	for _, m := range clear {
		if strings.Contains(d.output(), m) {
			t.Errorf("the log holds the contact id %s", m)
		}
	}
}

// privacy apply covers the spool: an event waiting under no rule (its
// detail answers 503) holds a contact id in clear; with contact_id: hash
// configured, run refuses, privacy apply rewrites the waiting body
// (webhook_spool=1) and compacts the file; then no byte of the clear id is
// left under the spool directory, the hash is, and run starts.
func TestPrivacyApplyRewritesTheSpool(t *testing.T) {
	const sid = 123
	spoolDir := t.TempDir()
	port, path := freePort(t), "/hooks/e2e-"+randHex(8)
	e := newEmulator(t, sim.Options{Surveys: []sim.SurveySpec{{ID: sid, Responses: 5, Seed: 4}},
		WebhookURL: fmt.Sprintf("http://127.0.0.1:%d%s", port, path), WebhookSchedule: []time.Duration{0, 200 * time.Millisecond, time.Second}})
	metrics := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cfgPath := writeConfig(t, e, nil, fmt.Sprintf("sync:\n  poll_interval: 1s\n  settle_lag: 0s\n"+
		"webhooks:\n  enabled: true\n  listen: 127.0.0.1:%d\n  path: %s\n  spool_dir: %s\n", port, path, spoolDir))
	rewriteConfig(t, cfgPath, map[string]string{"metrics:\n  listen: \"\"\n": "metrics:\n  listen: " + metrics + "\nshutdown:\n  drain_timeout: 2s\n",
		"max_retries: 10": "max_retries: 1"})
	d := startDaemon(t, cfgPath)
	waitReadyz(t, d, metrics, http.StatusOK, "ready", 90*time.Second)
	const contact = int64(918273655)
	id := survey.GUID("5b1e7a00-0000-4000-8000-000000000055")
	if err := e.sim.InjectFault(sim.Fault{Op: sim.OpGetResponse, Kind: "503", Survey: sid, Response: string(id)}); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Add(-2 * time.Minute)
	if _, err := e.sim.AddResponse(sid, survey.Response{ResponseID: id, ResponseStatus: survey.StatusCompleted, ContactID: ptrTo(contact), DistributionID: ptrTo(int64(sid*10 + 2)),
		DateCreated: survey.Time{Time: now.Add(-10 * time.Minute)}, DateCompleted: survey.TimeOf(now)}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); len(grepTree(t, spoolDir, []string{fmt.Sprint(contact)})) == 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the webhook with the contact id did not reach the spool; output:\n%s", tail(d.output(), 30))
		}
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	d.wait(t, time.Minute)

	keyFile := filepath.Join(t.TempDir(), "hash.key")
	if err := os.WriteFile(keyFile, []byte(privKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(cfgPath, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "privacy:\n  hash_key_file: %s\n  fields:\n    contact_id: hash\n", keyFile)
	_ = f.Close()
	if out, err := exec.Command(binPath, "run", "--config", cfgPath).CombinedOutput(); err == nil || !strings.Contains(string(out), "privacy apply") {
		t.Fatalf("run with stricter rules: %v\n%s", err, tail(string(out), 10))
	}
	out, err := exec.Command(binPath, "privacy", "apply", "--config", cfgPath).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "webhook_spool=1") {
		t.Fatalf("privacy apply: %v\n%s", err, out)
	}
	if hits := grepTree(t, spoolDir, []string{fmt.Sprint(contact)}); len(hits) > 0 {
		t.Fatalf("after privacy apply the contact id in clear is still in %v", hits)
	}
	if len(grepTree(t, spoolDir, []string{hmacHex(fmt.Sprint(contact))})) == 0 {
		t.Fatal("the waiting event's contact_id_hash is not in the spool")
	}
	d = startDaemon(t, cfgPath)
	waitReadyz(t, d, metrics, http.StatusOK, "ready", 90*time.Second)
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	d.wait(t, time.Minute)
	t.Logf("privacy apply: %s", strings.TrimSpace(string(out)))
}
