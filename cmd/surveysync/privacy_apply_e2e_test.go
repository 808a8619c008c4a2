package main

// Changing the privacy rules on a warehouse with data, through the real
// binary (issue 23 item 3): data synced with no rule holds markers; the
// rules are tightened (ip_address dropped, contact_id hashed, a question
// and the upload questions dropped); run refuses, naming each rule and the
// command; privacy apply, SIGKILLed midway and run again, rewrites the
// data; then no marker is left in any table, file or object, the hashed
// contact id joins pushed contacts, and run starts. One test per sink.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/surveysync/surveysync/config"
	"github.com/surveysync/surveysync/sim"
	"github.com/surveysync/surveysync/survey"
)

type tightenRun struct {
	cfgPath, dataDir, filesDir string
	cfg                        *config.Config
}

// syncThenTighten syncs a survey with uploads and one response carrying
// markers under no privacy rule, records a pushed contact, then appends
// stricter rules to the configuration.
func syncThenTighten(t *testing.T, w *testWarehouse) tightenRun {
	t.Helper()
	e := newEmulator(t, sim.Options{Surveys: []sim.SurveySpec{{ID: 123, Responses: 40, Seed: 5, Files: true}}})
	if _, err := e.sim.AddResponse(123, survey.Response{
		IPAddress: markerIP,
		ContactID: ptrTo(markerContact),
		URLParameters: []survey.URLParameter{
			{Name: "email", Value: markerEmail}, {Name: "customer", Value: markerCust}, {Name: "source", Value: "newsletter"},
		},
		Pages: []survey.Page{{ID: 1, Questions: []survey.Question{
			{ID: 45, Type: "single", Variable: "q45", Answers: []survey.Answer{{ChoiceID: survey.Int(1), ChoiceLabel: survey.Str("Ano")}}},
			{ID: 46, Type: "essay", Variable: "feedback", Answers: []survey.Answer{{Text: survey.Str("call me at " + markerEssay)}}},
		}}},
	}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	filesDir := filepath.Join(dir, "files")
	cfgPath := writeConfig(t, e, w, fmt.Sprintf("sync:\n  poll_interval: 1s\n  settle_lag: 0s\nfiles:\n  url: file://%s\n", filesDir))
	startDaemon(t, cfgPath, "--exit-when-synced").wait(t, 3*time.Minute)
	cfg, err := config.Load(cfgPath, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	recordPushedContact(t, cfg)
	if hits := grepTree(t, filesDir, []string{""}); len(hits) == 0 {
		t.Fatal("no uploaded file was copied: the test proves nothing")
	}
	keyFile := filepath.Join(dir, "hash.key")
	if err := os.WriteFile(keyFile, []byte(privKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(cfgPath, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, `privacy:
  hash_key_file: %s
  fields:
    ip_address: drop
    contact_id: hash
    url_parameters: {email: drop, customer: hash}
  questions:
    - {variable: feedback, action: drop}
    - {type: file_upload, action: drop}
`, keyFile)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return tightenRun{cfgPath: cfgPath, dataDir: cfg.Parquet.Dir, filesDir: filesDir, cfg: cfg}
}

// refuseApplyStart: run refuses naming the rules and the command;
// privacy apply is SIGKILLed at several points, then completes; run
// starts.
func refuseApplyStart(t *testing.T, r tightenRun) {
	t.Helper()
	out, err := exec.Command(binPath, "run", "--config", r.cfgPath, "--exit-when-synced").CombinedOutput()
	if err == nil {
		t.Fatalf("run started with stricter rules:\n%s", out)
	}
	for _, want := range []string{"privacy.fields.ip_address: keep → drop", "privacy.fields.contact_id: keep → hash",
		"privacy.questions[0] {variable: feedback}", "surveysync privacy apply --config " + r.cfgPath} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the refusal does not name %q:\n%s", want, out)
		}
	}
	for _, after := range []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 150 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond} {
		cmd := exec.Command(binPath, "privacy", "apply", "--config", r.cfgPath)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(after)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
	}
	out, err = exec.Command(binPath, "privacy", "apply", "--config", r.cfgPath).CombinedOutput()
	if err != nil {
		t.Fatalf("privacy apply: %v\n%s", err, out)
	}
	if strings.Contains(string(out), markerCust) || strings.Contains(string(out), markerIP) {
		t.Errorf("privacy apply printed a value:\n%s", out)
	}
	t.Logf("privacy apply:\n%s", out)
	out, err = exec.Command(binPath, "privacy", "apply", "--config", r.cfgPath).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "nothing to do") {
		t.Errorf("privacy apply again: %v\n%s", err, out)
	}
	d := startDaemon(t, r.cfgPath, "--exit-when-synced")
	d.wait(t, 3*time.Minute)
	for _, m := range dropped {
		if strings.Contains(d.output(), m) {
			t.Errorf("the daemon's log holds %q", m)
		}
	}
}

var tightened = []string{markerIP, markerEssay, fmt.Sprint(markerContact), markerEmail, markerCust}

func TestPrivacyApplyParquet(t *testing.T) {
	r := syncThenTighten(t, nil)
	if len(grepTree(t, r.dataDir, []string{markerIP})) == 0 {
		t.Fatal("the marker was not written before the rules changed: the test proves nothing")
	}
	refuseApplyStart(t, r)
	if hits := grepTree(t, r.dataDir, tightened); len(hits) > 0 {
		t.Errorf("values of tightened rules are left:\n%s", strings.Join(hits, "\n"))
	}
	if hits := grepTree(t, r.filesDir, []string{""}); len(hits) > 0 {
		t.Errorf("files of the dropped upload questions are left:\n%s", strings.Join(hits, "\n"))
	}
	want := hmacHex(fmt.Sprint(markerContact))
	resp := grepTree(t, filepath.Join(r.dataDir, "responses"), []string{want})
	ledger := grepTree(t, filepath.Join(r.dataDir, "_feeds"), []string{`"contact_id_hash":"` + want + `"`})
	if len(resp) == 0 || len(ledger) == 0 {
		t.Errorf("contact_id_hash %s: in responses %v, in the feed ledger %v", want, resp, ledger)
	}
	if len(grepTree(t, filepath.Join(r.dataDir, "responses"), []string{hmacHex(markerCust)})) == 0 || len(grepTree(t, r.dataDir, []string{"newsletter"})) == 0 {
		t.Error("the hashed url parameter customer, or the kept one, is not in responses")
	}
	raw, err := os.ReadFile(filepath.Join(r.dataDir, "_state", "privacy.json"))
	if err != nil || strings.Contains(string(raw), privKey) || !strings.Contains(string(raw), `"ip_address":"drop"`) {
		t.Errorf("_state/privacy.json: %v %s", err, raw)
	}

	// erase --contact finds the contact by its hash, in responses and in
	// the feed ledger, and succeeds.
	out := runErase(t, r.cfgPath, "--contact", fmt.Sprint(markerContact))
	if !strings.Contains(out, "erased 1 responses") || !strings.Contains(out, "pushed_contacts=1") {
		t.Errorf("erase --contact printed %q", out)
	}
	if hits := grepTree(t, r.dataDir, []string{want}); len(hits) > 0 {
		t.Errorf("the erased contact's hash is left:\n%s", strings.Join(hits, "\n"))
	}
}

func TestPrivacyApplyClickHouse(t *testing.T) {
	w := clickhouseOrSkip(t)
	cli, err := exec.LookPath("clickhouse-client")
	if err != nil {
		t.Skip("clickhouse-client is not on PATH")
	}
	host, port, _ := strings.Cut(w.addr, ":")
	query := func(q string) string {
		out, err := exec.Command(cli, "--host", host, "--port", port, "--query", q).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", q, err, out)
		}
		return string(out)
	}
	r := syncThenTighten(t, w)
	if !strings.Contains(query(fmt.Sprintf("SELECT * FROM %s.responses FORMAT TSV", w.db)), markerIP) {
		t.Fatal("the marker was not written before the rules changed: the test proves nothing")
	}
	// The webhook log, as a daemon with webhooks would have stored it.
	query(fmt.Sprintf(`INSERT INTO %s.webhook_events (event_id, event_name, survey_id, body, _version) VALUES
('ev1', 'response_received', 123, '{"ip_address":"%s","contact_id":%d,"survey_id":123}', 1)`, w.db, markerIP, markerContact))
	refuseApplyStart(t, r)
	tables := strings.Fields(query(fmt.Sprintf("SELECT name FROM system.tables WHERE database = '%s' AND engine NOT LIKE '%%View'", w.db)))
	for _, tbl := range tables {
		dump := query(fmt.Sprintf("SELECT * FROM %s.%s FORMAT TSV", w.db, tbl))
		for _, m := range tightened {
			if strings.Contains(dump, m) {
				t.Errorf("table %s holds %q", tbl, m)
			}
		}
	}
	if hits := grepTree(t, r.filesDir, []string{""}); len(hits) > 0 {
		t.Errorf("files of the dropped upload questions are left:\n%s", strings.Join(hits, "\n"))
	}
	if n := strings.TrimSpace(query(fmt.Sprintf("SELECT count() FROM %s.uploaded_files", w.db))); n != "0" {
		t.Errorf("uploaded_files keeps %s rows of dropped questions", n)
	}
	got := strings.TrimSpace(query(fmt.Sprintf(`SELECT r.contact_id_hash, p.feed
FROM %[1]s.responses_current AS r
ALL INNER JOIN (SELECT contact_id_hash, feed FROM %[1]s.pushed_contacts FINAL WHERE contact_id_hash != '') AS p USING (contact_id_hash)`, w.db)))
	if want := hmacHex(fmt.Sprint(markerContact)) + "\tcrm"; got != want {
		t.Errorf("responses ⋈ pushed_contacts on contact_id_hash = %q, want %q", got, want)
	}
	if resp := query(fmt.Sprintf("SELECT * FROM %s.responses FORMAT TSV", w.db)); !strings.Contains(resp, hmacHex(markerCust)) || !strings.Contains(resp, "newsletter") {
		t.Error("the hashed url parameter customer, or the kept one, is not in responses")
	}
	if body := query(fmt.Sprintf("SELECT body FROM %s.webhook_events", w.db)); !strings.Contains(body, hmacHex(fmt.Sprint(markerContact))) {
		t.Errorf("the webhook body was not rewritten: %s", body)
	}
	if rules := query(fmt.Sprintf("SELECT rules FROM %s.privacy_rules FINAL", w.db)); strings.Contains(rules, privKey) || !strings.Contains(rules, `"contact_id":"hash"`) {
		t.Errorf("privacy_rules: %s", rules)
	}
}
