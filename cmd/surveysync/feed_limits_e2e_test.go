package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/surveysync/surveysync/sim"
	"github.com/surveysync/surveysync/source/feed"
)

// A CSV file of 2 GiB whose third record opens a quote never closed (a
// sparse file: the rest is a hole), run by `surveysync feed run` on the
// Parquet sink: the command ends, the file is in failed/ with a report
// naming feeds[].csv_dir.max_record_bytes, the two rows before it are
// pushed, and the process's peak memory stays far below the record.
func TestFeedRefusesA2GiBCSVRecord(t *testing.T) {
	e := newEmulator(t, sim.Options{Surveys: specs(1, 1, 91)})
	did := e.ids[0]*10 + 1
	feedDir := t.TempDir()
	cfg := writeConfig(t, e, nil, fmt.Sprintf("feeds:\n  - name: crm\n    type: csv_dir\n    distribution_id: %d\n"+
		"    mapping: {email: email, user_field1: id}\n    dedupe_key: id\n    csv_dir: {dir: %s}\n", did, feedDir))
	path := filepath.Join(feedDir, "big.csv")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("id,email\n1,ann@example.com\n2,bob@example.com\n3,\"cyril@example.com"); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(2 << 30); err != nil {
		t.Fatal(err)
	}
	f.Close()

	cmd := exec.Command(binPath, "feed", "run", "crm", "--config", cfg)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The child's own high-water mark, read while it runs: rusage's
	// Maxrss is no use here, as Go starts a child with vfork and the
	// kernel carries the parent's (the test binary's) peak over the exec.
	peak := watchPeakRSS(cmd.Process.Pid)
	err = cmd.Wait()
	out := buf.Bytes()
	if err != nil {
		t.Fatalf("feed run: %v\n%s", err, tail(string(out), 20))
	}
	peakKB := peak()
	if peakKB == 0 {
		t.Fatal("the child's VmHWM was never read")
	}
	t.Logf("feed run: peak RSS %d MB for a 2 GiB record", peakKB/1024)
	if peakKB > 150*1024 {
		t.Fatalf("peak RSS %d MB: the record was buffered", peakKB/1024)
	}
	reports, _ := filepath.Glob(filepath.Join(feedDir, "failed", "*big.csv.report.json"))
	if len(reports) != 1 {
		t.Fatalf("failed/ reports %v; output:\n%s", reports, tail(string(out), 20))
	}
	r, err := feed.ReadFileReport(reports[0])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(r.Error, "feeds[].csv_dir.max_record_bytes") || !strings.Contains(r.Error, "after line 3") || r.Summary.Pushed != 2 {
		t.Fatalf("report: %+v", r)
	}
	if left, _ := filepath.Glob(filepath.Join(feedDir, "processing", "*big.csv")); len(left) != 0 {
		t.Fatalf("left in processing/: %v", left)
	}
	if n := len(e.sim.Contacts(did)); n != 2 {
		t.Fatalf("%d contacts created, want 2", n)
	}
	if !strings.Contains(string(out), "max_record_bytes") {
		t.Fatalf("the log does not name the key:\n%s", tail(string(out), 20))
	}
}

// watchPeakRSS polls /proc/pid/status every 5 ms until the process has
// exited and returns a function that waits for the poller and gives the
// largest VmHWM (KiB) read; call it after Wait.
func watchPeakRSS(pid int) func() int64 {
	var peak int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
			if err != nil {
				return
			}
			for _, line := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
					kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
					peak = max(peak, kb)
				}
				if strings.HasPrefix(line, "State:") && strings.Contains(line, "Z") {
					return
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return func() int64 { <-done; return peak }
}
