// Package files_test runs uploaded-file copying end to end, wired the way
// cmd wires it: the emulator (sim) serves the files, the real API
// client (source/surveyapi) downloads them, and sink/blob's Copier stores
// them in file:// and in a local S3 server (Versity S3 Gateway).
//
// TestEmulatorToStores always runs. The figures of docs/benchmarks.md
// ("Uploaded files (issue 5)") come from TestFilesBenchmark, which runs only
// with SURVEYSYNC_BENCH_FILES=1:
//
//	SURVEYSYNC_BENCH_FILES=1 go test -run TestFilesBenchmark -v -timeout 30m ./bench/files/
package files_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/surveysync/surveysync/internal/testkit/blobtest"
	"github.com/surveysync/surveysync/pipeline/files"
	"github.com/surveysync/surveysync/sim"
	"github.com/surveysync/surveysync/sink/blob"
	"github.com/surveysync/surveysync/sink/parquet"
	"github.com/surveysync/surveysync/source/surveyapi"
	"github.com/surveysync/surveysync/survey"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}

type env struct {
	sim    *sim.Sim
	client *surveyapi.Client
}

func newEnv(t testing.TB, surveys ...sim.SurveySpec) *env {
	s, err := sim.New(sim.Options{Token: "tok", Surveys: surveys, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(func() { srv.Close(); s.Close() })
	c, err := surveyapi.New(surveyapi.Options{
		BaseURL: srv.URL + "/v1", Token: "tok", UserAgent: "surveysync-test (dev@example.com)",
		MaxConcurrency: 32, RetryInitial: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	return &env{sim: s, client: c}
}

// downloader adapts the API client to the copier, as cmd does.
func (e *env) downloader() blob.Downloader {
	return blob.DownloadFunc(func(ctx context.Context, surveyID int64, rid, fid survey.GUID) (*blob.Download, error) {
		f, err := e.client.DownloadFile(ctx, surveyID, rid, fid)
		if err != nil {
			return nil, err
		}
		return &blob.Download{Body: f.Body, ContentType: f.ContentType, FileName: f.FileName, Size: f.Size}, nil
	})
}

// refs returns up to n uploaded files of a survey, in response order.
func (e *env) refs(surveyID int64, n int) []files.FileRef {
	var out []files.FileRef
	for r := range e.sim.Responses(surveyID) {
		out = append(out, files.FindFiles(&r, nil)...)
		if len(out) >= n {
			return out[:n]
		}
	}
	return out
}

type target struct {
	name string
	open func(t testing.TB) *blob.Store
}

// serverPID is the S3 server's process id in the benchmark (0 for file://).
var serverPID int

// cpuOf returns the CPU time (user+system) of a process so far.
func cpuOf(pid int) time.Duration {
	p := "/proc/self/stat"
	if pid > 0 {
		p = "/proc/" + strconv.Itoa(pid) + "/stat"
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return 0
	}
	// fields after the command name "(…)": state is field 3; utime 14, stime 15
	rest := string(b[strings.LastIndexByte(string(b), ')')+2:])
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond // USER_HZ = 100
}

func targets() []target {
	return []target{
		{"file", func(t testing.TB) *blob.Store {
			st, err := blob.OpenStore(context.Background(), blob.StoreOptions{DataDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st
		}},
		{"s3", func(t testing.TB) *blob.Store {
			v := blobtest.Start(t)
			v.CreateBucket(t, "surveysync")
			serverPID = v.PID()
			st, err := blob.OpenStore(context.Background(), blob.StoreOptions{
				URL: v.URL("surveysync"), AccessKey: blobtest.AccessKey, SecretKey: blobtest.SecretKey})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st
		}},
	}
}

func run(t testing.TB, c *blob.Copier) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
		}
	}
	t.Cleanup(stop)
	return stop
}

func waitIdle(t testing.TB, c *blob.Copier, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !c.Idle() {
		if time.Now().After(deadline) {
			t.Fatalf("copier not idle after %v (queue %d)", d, c.QueueDepth())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Every file the emulator serves arrives byte-identical, with its Czech
// name, although downloads are cut mid-body now and then.
func TestEmulatorToStores(t *testing.T) {
	for _, tg := range targets() {
		t.Run(tg.name, func(t *testing.T) {
			e := newEnv(t, sim.SurveySpec{ID: 4574, Responses: 60, Seed: 3, Files: true, FileSize: 300 << 10})
			if err := e.sim.InjectFault(sim.Fault{Op: sim.OpDownloadFile, Kind: sim.FaultReset, Count: 3}); err != nil {
				t.Fatal(err)
			}
			st := tg.open(t)
			ix, err := parquet.OpenFileIndex(filepath.Join(t.TempDir(), "uploaded_files.db"))
			if err != nil {
				t.Fatal(err)
			}
			defer ix.Close()
			c := blob.NewCopier(st, e.downloader(), ix, blob.Options{
				SpoolDir: t.TempDir(), RetryInitial: 20 * time.Millisecond, FlushInterval: 20 * time.Millisecond,
				IsPermanent: surveyapi.IsPermanent, Registerer: prometheus.NewRegistry(),
			})
			run(t, c)
			var refs []files.FileRef
			for r := range e.sim.Responses(4574) {
				c.HandleResponse(context.Background(), &r)
				refs = append(refs, files.FindFiles(&r, nil)...)
			}
			if len(refs) < 20 {
				t.Fatalf("only %d files generated", len(refs))
			}
			waitIdle(t, c, 60*time.Second)
			names := map[string]bool{}
			retried := 0
			for _, r := range refs {
				info, open, ok := e.sim.File(r.SurveyID, r.ResponseID, r.FileID)
				if !ok {
					t.Fatalf("emulator does not know %s", r.Key())
				}
				h := sha256.New()
				io.Copy(h, open())
				want := hex.EncodeToString(h.Sum(nil))
				rec, ok := ix.Get(r)
				if !ok || !rec.Stored() || rec.SHA256 != want || rec.Size != info.Size || rec.FileName != info.Name || rec.ContentType != info.ContentType {
					t.Fatalf("index row %+v, want sha %s size %d name %q", rec, want, info.Size, info.Name)
				}
				retried += rec.Attempts
				rd, err := st.NewReader(context.Background(), r.Key())
				if err != nil {
					t.Fatal(err)
				}
				h.Reset()
				io.Copy(h, rd)
				rd.Close()
				if got := hex.EncodeToString(h.Sum(nil)); got != want {
					t.Fatalf("%s: stored sha %s, emulator %s", r.Key(), got, want)
				}
				a, err := st.Attributes(context.Background(), r.Key())
				if err != nil {
					t.Fatal(err)
				}
				if a.Metadata[blob.MetaFileName] != info.Name {
					t.Errorf("%s: metadata filename %q, want %q", r.Key(), a.Metadata[blob.MetaFileName], info.Name)
				}
				names[info.Name] = true
			}
			if retried != 3 {
				t.Errorf("failed attempts recorded = %d, want 3 (the injected resets)", retried)
			}
			if !names["Přihláška – životopis.pdf"] {
				t.Errorf("the Czech PDF name never came through: %v", names)
			}
		})
	}
}

// ---- benchmark ----

func procStatus(field string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// resetPeakRSS makes VmHWM start again from the current RSS.
func resetPeakRSS() { os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

func TestFilesBenchmark(t *testing.T) {
	if os.Getenv("SURVEYSYNC_BENCH_FILES") != "1" {
		t.Skip("set SURVEYSYNC_BENCH_FILES=1 to run the uploaded-files benchmark")
	}
	const (
		smallN, smallSize = 10_000, 50 << 10
		largeN, largeSize = 20, 50 << 20
	)
	e := newEnv(t,
		sim.SurveySpec{ID: 1, Responses: 12_000, Seed: 5, Files: true, FileSize: smallSize},
		sim.SurveySpec{ID: 2, Responses: 80, Seed: 6, Files: true, FileSize: largeSize},
	)
	small, large := e.refs(1, smallN), e.refs(2, largeN)
	if len(small) != smallN || len(large) != largeN {
		t.Fatalf("generated %d small and %d large files", len(small), len(large))
	}
	for _, tg := range targets() {
		if only := os.Getenv("SURVEYSYNC_BENCH_TARGET"); only != "" && only != tg.name {
			continue
		}
		t.Run(tg.name, func(t *testing.T) {
			st := tg.open(t)
			ix, err := parquet.OpenFileIndex(filepath.Join(t.TempDir(), "uploaded_files.db"))
			if err != nil {
				t.Fatal(err)
			}
			defer ix.Close()
			for _, set := range []struct {
				name string
				refs []files.FileRef
				size int64
			}{{"small", small, smallSize}, {"large", large, largeSize}} {
				conc := 4 // the daemon's default files.max_concurrency
				if v, err := strconv.Atoi(os.Getenv("SURVEYSYNC_BENCH_CONCURRENCY")); err == nil && v > 0 {
					conc = v
				}
				c := blob.NewCopier(st, e.downloader(), ix, blob.Options{
					MaxConcurrency: conc, QueueSize: 20_000, SpoolDir: t.TempDir(),
					IsPermanent: surveyapi.IsPermanent, Registerer: prometheus.NewRegistry(),
				})
				stop := run(t, c)
				time.Sleep(50 * time.Millisecond)
				baseRSS := procStatus("VmRSS")
				resetPeakRSS()
				cpu0, srv0 := cpuOf(0), time.Duration(0)
				if tg.name == "s3" {
					srv0 = cpuOf(serverPID)
				}
				start := time.Now()
				c.Enqueue(set.refs...)
				waitIdle(t, c, 20*time.Minute)
				elapsed := time.Since(start)
				peak := procStatus("VmHWM")
				cpu := cpuOf(0) - cpu0
				var srv time.Duration
				if tg.name == "s3" {
					srv = cpuOf(serverPID) - srv0
				}
				stop()
				mb := float64(int64(len(set.refs))*set.size) / 1e6
				fmt.Printf("BENCH %s %s (concurrency %d): %d files x %d KiB in %.2fs: %.0f files/s, %.1f MB/s; RSS baseline %.0f MB, peak %.0f MB (+%.0f MB)\n",
					tg.name, set.name, conc, len(set.refs), set.size>>10, elapsed.Seconds(),
					float64(len(set.refs))/elapsed.Seconds(), mb/elapsed.Seconds(),
					float64(baseRSS)/(1<<20), float64(peak)/(1<<20), float64(peak-baseRSS)/(1<<20))
				fmt.Printf("BENCH %s %s: CPU used: this process (emulator + client + copier) %.1fs, S3 server %.1fs\n",
					tg.name, set.name, cpu.Seconds(), srv.Seconds())
				for _, r := range set.refs[:3] {
					if rec, ok := ix.Get(r); !ok || !rec.Stored() {
						t.Fatalf("%s not stored: %+v", r.Key(), rec)
					}
				}
			}
		})
	}
}
