package feed_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	chsink "github.com/surveysync/surveysync/sink/clickhouse"
	"github.com/surveysync/surveysync/sink/parquet"
	"github.com/surveysync/surveysync/source/feed"
	"github.com/surveysync/surveysync/source/surveyapi"
)

// benchResult is what the benchmark child prints.
type benchResult struct {
	Rows        int64   `json:"rows"`
	Pushed      int64   `json:"pushed"`
	Seconds     float64 `json:"seconds"`
	PeakRSSKB   int64   `json:"peak_rss_kb"`
	PeakHeapMB  float64 `json:"peak_heap_mb"`
	StartHeapMB float64 `json:"start_heap_mb"`
}

// TestFeedThroughput is the feed benchmark (docs/benchmarks.md "Feeds"):
// it pushes FEED_BENCH_ROWS (default 10000,100000) rows of a CSV to the
// emulator from a separate process — so that its peak RSS is the feed's,
// not the emulator's — with the rate limit off; validation, push and the
// ledger (file, or ClickHouse when FEED_BENCH_CH=1 and the test server is
// set) included. Run: FEED_BENCH=1 go test -run TestFeedThroughput -v ./source/feed/
func TestFeedThroughput(t *testing.T) {
	if os.Getenv("FEED_BENCH") == "" {
		t.Skip("set FEED_BENCH=1 to run the feed benchmark")
	}
	sizes := os.Getenv("FEED_BENCH_ROWS")
	if sizes == "" {
		sizes = "10000,100000"
	}
	for _, s := range strings.Split(sizes, ",") {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			simulator, url := startSim(t)
			dir, ledgerDir := t.TempDir(), t.TempDir()
			genCSV(t, filepath.Join(dir, "bench.csv"), n, false)
			env := append(os.Environ(), "FEED_BENCH_CHILD=1", "FEED_DIR="+dir, "FEED_LEDGER="+ledgerDir, "FEED_API="+url)
			if os.Getenv("FEED_BENCH_CH") != "" {
				s := openCH(t)
				env = append(env, "FEED_BENCH_CH_DB="+s.Database())
			}
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = env
			cmd.Stderr = os.Stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatal(err)
			}
			var r benchResult
			if err := json.Unmarshal(out, &r); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			if got := len(simulator.Contacts(dist)); got != n || r.Pushed != int64(n) {
				t.Fatalf("pushed %d, emulator has %d, want %d", r.Pushed, got, n)
			}
			t.Logf("%d rows: %.2fs, %.0f contacts/s, peak RSS %.1f MiB, heap %.1f → peak %.1f MiB (GOMAXPROCS %d)",
				n, r.Seconds, float64(n)/r.Seconds, float64(r.PeakRSSKB)/1024, r.StartHeapMB, r.PeakHeapMB, runtime.GOMAXPROCS(0))
		})
	}
}

func benchChild() {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	c, err := surveyapi.New(surveyapi.Options{BaseURL: os.Getenv("FEED_API") + "/v1", Token: "test-token",
		UserAgent: "surveysync-bench (test@example.cz)", MaxConcurrency: 64})
	if err != nil {
		fail(err)
	}
	var ledger feed.Ledger
	ctx := context.Background()
	if db := os.Getenv("FEED_BENCH_CH_DB"); db != "" {
		s, err := chsink.Open(ctx, chsink.Options{Addr: []string{os.Getenv("SURVEYSYNC_TEST_CLICKHOUSE_ADDR")}, Database: db})
		if err != nil {
			fail(err)
		}
		defer s.Close()
		ledger = chsink.NewFeedLedger(s)
	} else {
		l, err := parquet.NewFileLedger(os.Getenv("FEED_LEDGER"))
		if err != nil {
			fail(err)
		}
		defer l.Close()
		ledger = l
	}
	o := csvFeed(os.Getenv("FEED_DIR"))
	if v, _ := strconv.Atoi(os.Getenv("FEED_BENCH_CONCURRENCY")); v > 0 {
		o.Concurrency = v
	}
	if v, _ := strconv.Atoi(os.Getenv("FEED_BENCH_CHUNK")); v > 0 {
		o.ChunkRows = v
	}
	r, err := feed.NewRunner(feed.RunnerOptions{Feeds: []feed.Options{o}, API: c, Ledger: ledger,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		fail(err)
	}
	runtime.GC()
	start := heapBytes()
	var peak uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tk := time.NewTicker(5 * time.Millisecond)
		defer tk.Stop()
		for {
			if h := heapBytes(); h > peak {
				peak = h
			}
			select {
			case <-stop:
				return
			case <-tk.C:
			}
		}
	}()
	if p := os.Getenv("FEED_BENCH_CPUPROFILE"); p != "" {
		f, err := os.Create(p)
		if err != nil {
			fail(err)
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	t0 := time.Now()
	if err := r.RunOnce(ctx, "crm"); err != nil {
		fail(err)
	}
	secs := time.Since(t0).Seconds()
	close(stop)
	wg.Wait()
	reps, _ := filepath.Glob(filepath.Join(os.Getenv("FEED_DIR"), "done", "*.report.json"))
	if len(reps) != 1 {
		fail(fmt.Errorf("reports: %v", reps))
	}
	rep, err := feed.ReadFileReport(reps[0])
	if err != nil {
		fail(err)
	}
	pprof.StopCPUProfile()
	json.NewEncoder(os.Stdout).Encode(benchResult{Rows: rep.Summary.Rows, Pushed: rep.Summary.Pushed, Seconds: secs,
		PeakRSSKB: vmHWM(), PeakHeapMB: float64(peak) / (1 << 20), StartHeapMB: float64(start) / (1 << 20)})
	os.Exit(0)
}

func heapBytes() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// vmHWM is the process's peak resident set size in KiB (Linux).
func vmHWM() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			v, _ := strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
			return v
		}
	}
	return -1
}
