package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/surveysync/surveysync/internal/testkit/zktest"
	"github.com/surveysync/surveysync/pipeline/flatten"
	"github.com/surveysync/surveysync/sim"
	"github.com/surveysync/surveysync/sink/parquet"
)

func cli(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := runCLI(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestVersionAndUsage(t *testing.T) {
	if code, out, _ := cli(t, "version"); code != 0 || !strings.HasPrefix(out, "surveysync ") {
		t.Fatalf("version: %d %q", code, out)
	}
	if code, _, errOut := cli(t, "frobnicate"); code != exitUsage || !strings.Contains(errOut, `unknown command "frobnicate"`) {
		t.Fatalf("unknown command: %d %q", code, errOut)
	}
	if code, _, _ := cli(t); code != exitUsage {
		t.Fatalf("no command: %d", code)
	}
}

func TestConfigPrintMasksSecrets(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "c.yaml")
	yaml := "api:\n  token: tok-very-secret-123\n  user_agent: \"acme (ops@acme.example)\"\nclickhouse:\n  addr: [127.0.0.1:9000]\n  password: pw-very-secret-456\nsurveys: [1]\n"
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := cli(t, "config", "print", "--config", path)
	if code != 0 {
		t.Fatalf("config print: %d %s", code, errOut)
	}
	if strings.Contains(out, "tok-very-secret-123") || strings.Contains(out, "pw-very-secret-456") {
		t.Fatalf("config print shows a secret:\n%s", out)
	}
	if !strings.Contains(out, "127.0.0.1:9000") {
		t.Fatalf("config print lacks the configuration:\n%s", out)
	}
}

func TestBadConfigNamesKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, []byte("api:\n  base_url: https://example.invalid/v2\n  token: x\n  user_agent: \"a (b@c.d)\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := cli(t, "run", "--config", path)
	if code != exitConfig || !strings.Contains(errOut, "api.base_url must end in /v1") {
		t.Fatalf("run with a bad base_url: %d %q", code, errOut)
	}
}

func TestDoctorAgainstEmulator(t *testing.T) {
	e := newEmulator(t, simOptions(1, 10))
	path := writeConfig(t, e, nil, "")
	code, out, errOut := cli(t, "doctor", "--config", path)
	if code != 0 {
		t.Fatalf("doctor: %d\n%s\n%s", code, out, errOut)
	}
	if !strings.Contains(out, "ok    api token") || !strings.Contains(out, "all checks passed") {
		t.Fatalf("doctor output:\n%s", out)
	}
	// A wrong token fails with what to fix, and the token is not printed.
	bad := strings.Replace(readFile(t, path), tokenOf(e), "wrong-token-789", 1)
	if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, _ = cli(t, "doctor", "--config", path)
	if code == 0 || !strings.Contains(out, "FAIL  api token") || !strings.Contains(out, "fix:") || strings.Contains(out, "wrong-token-789") {
		t.Fatalf("doctor with a wrong token: %d\n%s", code, out)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestViewsNeedsClickHouse(t *testing.T) {
	code, _, errOut := cli(t, "views", "--parquet-dir", t.TempDir())
	if code != exitConfig || !strings.Contains(errOut, "wide views live in ClickHouse") {
		t.Errorf("views without ClickHouse: exit %d, %q", code, errOut)
	}
}

func TestExportFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"export", "--survey", "1", "--format", "xlsx"}, exitUsage, "want csv or parquet"},
		{[]string{"export"}, exitUsage, "--survey ID is required"},
		{[]string{"export", "--survey", "1", "--since", "yesterday"}, exitUsage, "--since"},
		{[]string{"export", "--survey", "1", "--parquet-dir", t.TempDir()}, exitFail, "no responses of survey 1 under"},
	} {
		code, _, errOut := cli(t, c.args...)
		if code != c.code || !strings.Contains(errOut, c.msg) {
			t.Errorf("%v: exit %d, %q", c.args, code, errOut)
		}
	}
}

func TestResyncFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"resync"}, exitUsage, "--survey ID is required"},
		{[]string{"resync", "--survey", "1", "--from", "2024-13-01"}, exitUsage, "want 2006-01-02"},
		{[]string{"resync", "--survey", "1", "--to", "soon"}, exitUsage, "--to"},
		{[]string{"resync", "--survey", "1", "--metrics-listen", ""}, exitFail, "the demo's emulator lives inside a running daemon"},
	} {
		code, _, errOut := cli(t, c.args...)
		if code != c.code || !strings.Contains(errOut, c.msg) {
			t.Errorf("%v: exit %d, %q", c.args, code, errOut)
		}
	}
}

// export without ClickHouse reads the Parquet sink's files: every current
// response once, with the BOM, and a Parquet file of the same rows.
func TestExportFromParquetSink(t *testing.T) {
	dir := t.TempDir()
	ps, err := parquet.Open(parquet.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	em, err := sim.New(sim.Options{Surveys: []sim.SurveySpec{{ID: 4574, Responses: 25, Seed: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	defer em.Close()
	ids := []int64{4574}
	b := flatten.NewBuilder(memory.NewGoAllocator())
	defer b.Release()
	v := uint64(1)
	for r := range em.Responses(ids[0]) {
		v++
		if err := b.Add(flatten.Item{Response: &r, SurveyID: ids[0], ResponseID: r.ResponseID, Version: v, SyncedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	batch := b.Flush()
	defer batch.Release()
	if err := ps.Write(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	ps.Close()
	out := filepath.Join(t.TempDir(), "out.csv")
	survey := strconv.FormatInt(ids[0], 10)
	code, _, errOut := cli(t, "export", "--survey", survey, "--parquet-dir", dir, "--bom", "-o", out)
	data := readFile(t, out)
	if code != exitOK || !strings.HasPrefix(data, "\ufeffresponse_id,") || !strings.Contains(errOut, "exported 25 responses") {
		t.Fatalf("export: exit %d, %q, file starts %q", code, errOut, data[:min(len(data), 40)])
	}
	recs, err := csv.NewReader(strings.NewReader(strings.TrimPrefix(data, "\ufeff"))).ReadAll()
	if err != nil || len(recs) != 26 {
		t.Errorf("CSV: %d records (%v), want 26", len(recs), err)
	}
	code, _, errOut = cli(t, "export", "--survey", survey, "--parquet-dir", dir, "--format", "parquet", "-o", out+".parquet")
	if code != exitOK || !strings.HasPrefix(readFile(t, out+".parquet"), "PAR1") || !strings.Contains(errOut, "exported 25 responses") {
		t.Errorf("export --format parquet: exit %d, %q", code, errOut)
	}
}

// doctor checks the ha servers: a live ZooKeeper passes (and the election
// is described), a closed port fails naming ha.servers.
func TestDoctorChecksHAServers(t *testing.T) {
	zkAddr := zktest.Addr(t)
	e := newEmulator(t, simOptions(1, 10))
	path := writeConfig(t, e, nil, fmt.Sprintf("ha:\n  servers: [%s]\n  root: /surveysync-test/doctor-%s\n", zkAddr, randHex(4)))
	code, out, errOut := cli(t, "doctor", "--config", path)
	if code != 0 || !strings.Contains(out, "ok    ha servers "+zkAddr) || !strings.Contains(out, "info  ha: no instance campaigns yet") {
		t.Fatalf("doctor with ZooKeeper at %s: %d\n%s\n%s", zkAddr, code, out, errOut)
	}
	closed := freePort(t)
	bad := strings.Replace(readFile(t, path), zkAddr, fmt.Sprintf("127.0.0.1:%d", closed), 1)
	if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, _ = cli(t, "doctor", "--config", path)
	if code == 0 || !strings.Contains(out, "FAIL  ha servers") || !strings.Contains(out, "fix: check ha.servers") {
		t.Fatalf("doctor with no ZooKeeper: %d\n%s", code, out)
	}
}
