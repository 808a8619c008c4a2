package main

// Privacy through the real binary (issue 23): a marker value in each
// dropped field appears in no table, no file under the data directory or
// the files store, no log line; a hashed contact id joins responses to
// pushed contacts. One test per sink.

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/surveysync/surveysync/config"
	"github.com/surveysync/surveysync/daemon"
	"github.com/surveysync/surveysync/record"
	"github.com/surveysync/surveysync/sim"
	"github.com/surveysync/surveysync/survey"
)

const (
	privKey       = "privacy-e2e-key-0123456789abcdef"
	markerIP      = "marker-ip-7f3a"
	markerEmail   = "marker-email-7f3a@example.com"
	markerCust    = "marker-customer-7f3a"
	markerEssay   = "marker-essay-7f3a"
	markerContact = int64(918273645)
)

// dropped are the markers that must appear nowhere (the customer value is
// hashed: its clear text must not appear either).
var dropped = []string{markerIP, markerEmail, markerCust, markerEssay, fmt.Sprint(markerContact)}

func hmacHex(s string) string {
	m := hmac.New(sha256.New, []byte(privKey))
	m.Write([]byte(s))
	return hex.EncodeToString(m.Sum(nil))
}

type privacyRun struct {
	cfgPath, dataDir, filesDir, out string
	cfg                             *config.Config
}

// runPrivate syncs an emulator survey (with upload questions) plus one
// response carrying every marker, with the privacy rules.
func runPrivate(t *testing.T, w *testWarehouse) privacyRun {
	t.Helper()
	e := newEmulator(t, sim.Options{Surveys: []sim.SurveySpec{{ID: 123, Responses: 40, Seed: 5, Files: true}}})
	essay := survey.Str("call me at " + markerEssay)
	if _, err := e.sim.AddResponse(123, survey.Response{
		IPAddress: markerIP,
		ContactID: ptrTo(markerContact),
		URLParameters: []survey.URLParameter{
			{Name: "email", Value: markerEmail}, {Name: "customer", Value: markerCust}, {Name: "source", Value: "newsletter"},
		},
		Pages: []survey.Page{{ID: 1, Questions: []survey.Question{
			{ID: 45, Type: "single", Variable: "q45", Answers: []survey.Answer{{ChoiceID: survey.Int(1), ChoiceLabel: survey.Str("Ano")}}},
			{ID: 46, Type: "essay", Variable: "feedback", Answers: []survey.Answer{{Text: essay}}},
		}}},
	}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "hash.key")
	if err := os.WriteFile(keyFile, []byte(privKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	filesDir := filepath.Join(dir, "files")
	extra := fmt.Sprintf(`sync:
  poll_interval: 1s
  settle_lag: 0s
files:
  url: file://%s
privacy:
  hash_key_file: %s
  fields:
    ip_address: drop
    contact_id: hash
    url_parameters: {email: drop, customer: hash}
  questions:
    - {type: essay, action: drop}
    - {type: file_upload, action: drop}
`, filesDir, keyFile)
	cfgPath := writeConfig(t, e, w, extra)
	d := startDaemon(t, cfgPath, "--exit-when-synced")
	d.wait(t, 3*time.Minute)
	cfg, err := config.Load(cfgPath, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := d.output()
	if strings.Contains(out, privKey) {
		t.Error("the hash key appears in the daemon's output")
	}
	printed, err := exec.Command(binPath, "config", "print", "--config", cfgPath).CombinedOutput()
	if err != nil || strings.Contains(string(printed), privKey) {
		t.Errorf("config print: %v, or it shows the key", err)
	}
	return privacyRun{cfgPath: cfgPath, dataDir: cfg.Parquet.Dir, filesDir: filesDir, out: out, cfg: cfg}
}

func ptrTo[T any](v T) *T { return &v }

// recordPushedContact records, through the daemon's own warehouse (with its
// privacy wrapper), that a feed pushed the marker contact.
func recordPushedContact(t *testing.T, cfg *config.Config) {
	t.Helper()
	ctx := context.Background()
	wh, err := daemon.OpenWarehouse(ctx, cfg, daemon.NewLogger(cfg, os.Stderr), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	defer wh.Close()
	l, err := wh.FeedLedger()
	if err != nil {
		t.Fatal(err)
	}
	if err := l.RecordContacts(ctx, []record.ContactEntry{{Feed: "crm", Key: "k1", DistributionID: 7, State: "pushed",
		ContactID: markerContact, BatchID: "b1", UpdatedAt: time.Now()}}); err != nil {
		t.Fatal(err)
	}
}

// grepTree reports every file under root whose content (every value of
// every column for Parquet, which is compressed; the bytes otherwise)
// contains one of needles.
func grepTree(t *testing.T, root string, needles []string) []string {
	t.Helper()
	var hits []string
	err := filepath.WalkDir(root, func(path string, de fs.DirEntry, err error) error {
		if err != nil || de.IsDir() {
			return err
		}
		var text string
		if strings.HasSuffix(path, ".parquet") {
			text = parquetText(t, path)
		} else {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			text = string(b)
		}
		for _, n := range needles {
			if strings.Contains(text, n) {
				hits = append(hits, fmt.Sprintf("%s holds %q", path, n))
			}
		}
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return hits
}

// parquetText renders every value of every column of a Parquet file, and
// its footer's statistics.
func parquetText(t *testing.T, path string) string {
	t.Helper()
	pf, err := file.OpenParquetFile(path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	var b strings.Builder
	for rg := 0; rg < pf.NumRowGroups(); rg++ {
		md := pf.MetaData().RowGroup(rg)
		for c := 0; c < md.NumColumns(); c++ {
			cc, err := md.ColumnChunk(c)
			if err != nil {
				t.Fatal(err)
			}
			if st, err := cc.Statistics(); err == nil && st != nil && st.HasMinMax() {
				fmt.Fprintf(&b, "%s %s\n", st.EncodeMin(), st.EncodeMax())
			}
		}
	}
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{}, memory.NewGoAllocator())
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := fr.ReadTable(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Release()
	for i := 0; i < int(tbl.NumCols()); i++ {
		for _, chunk := range tbl.Column(i).Data().Chunks() {
			fmt.Fprintln(&b, chunk)
		}
	}
	return b.String()
}

func TestPrivacyParquet(t *testing.T) {
	r := runPrivate(t, nil)
	recordPushedContact(t, r.cfg)
	if hits := grepTree(t, r.dataDir, dropped); len(hits) > 0 {
		t.Errorf("dropped values were written:\n%s", strings.Join(hits, "\n"))
	}
	for _, m := range dropped {
		if strings.Contains(r.out, m) {
			t.Errorf("the log holds %q", m)
		}
	}
	if hits := grepTree(t, r.filesDir, []string{""}); len(hits) > 0 {
		t.Errorf("files of dropped upload questions were copied:\n%s", strings.Join(hits, "\n"))
	}
	// The hash is where the documentation says, and the ledger holds the same.
	want := hmacHex(fmt.Sprint(markerContact))
	resp := grepTree(t, filepath.Join(r.dataDir, "responses"), []string{want})
	ledger := grepTree(t, filepath.Join(r.dataDir, "_feeds"), []string{`"contact_id_hash":"` + want + `"`})
	if len(resp) == 0 || len(ledger) == 0 {
		t.Errorf("contact_id_hash %s: in responses %v, in the feed ledger %v", want, resp, ledger)
	}
	if len(grepTree(t, filepath.Join(r.dataDir, "responses"), []string{hmacHex(markerCust)})) == 0 {
		t.Error("the hashed url parameter customer is not in responses")
	}
	if len(grepTree(t, r.dataDir, []string{"newsletter"})) == 0 {
		t.Error("a kept url parameter is missing: the test proves nothing")
	}
}

func TestPrivacyClickHouse(t *testing.T) {
	w := clickhouseOrSkip(t)
	cli, err := exec.LookPath("clickhouse-client")
	if err != nil {
		t.Skip("clickhouse-client is not on PATH")
	}
	r := runPrivate(t, w)
	recordPushedContact(t, r.cfg)
	host, port, _ := strings.Cut(w.addr, ":")
	query := func(q string) string {
		out, err := exec.Command(cli, "--host", host, "--port", port, "--query", q).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", q, err, out)
		}
		return string(out)
	}
	tables := strings.Fields(query(fmt.Sprintf("SELECT name FROM system.tables WHERE database = '%s' AND engine NOT LIKE '%%View'", w.db)))
	if len(tables) < 5 {
		t.Fatalf("tables: %v", tables)
	}
	for _, tbl := range tables {
		dump := query(fmt.Sprintf("SELECT * FROM %s.%s FORMAT TSV", w.db, tbl))
		for _, m := range dropped {
			if strings.Contains(dump, m) {
				t.Errorf("table %s holds %q", tbl, m)
			}
		}
	}
	for _, m := range dropped {
		if strings.Contains(r.out, m) {
			t.Errorf("the log holds %q", m)
		}
	}
	if hits := grepTree(t, r.filesDir, []string{""}); len(hits) > 0 {
		t.Errorf("files of dropped upload questions were copied:\n%s", strings.Join(hits, "\n"))
	}
	if hits := grepTree(t, r.dataDir, dropped); len(hits) > 0 {
		t.Errorf("dropped values under the data directory:\n%s", strings.Join(hits, "\n"))
	}
	// The join analysts will write.
	got := strings.TrimSpace(query(fmt.Sprintf(`SELECT r.contact_id_hash, p.feed
FROM %[1]s.responses_current AS r
ALL INNER JOIN (SELECT contact_id_hash, feed FROM %[1]s.pushed_contacts FINAL WHERE contact_id_hash != '') AS p USING (contact_id_hash)`, w.db)))
	if want := hmacHex(fmt.Sprint(markerContact)) + "\tcrm"; got != want {
		t.Errorf("responses ⋈ pushed_contacts on contact_id_hash = %q, want %q", got, want)
	}
	if n := strings.TrimSpace(query(fmt.Sprintf("SELECT count() FROM %s.responses_current WHERE contact_id IS NOT NULL OR ip_address != ''", w.db))); n != "0" {
		t.Errorf("%s responses keep a contact_id or an ip_address", n)
	}
}
