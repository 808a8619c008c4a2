package blob

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/surveysync/surveysync/internal/permanent"
	"github.com/surveysync/surveysync/internal/testkit/blobtest"
	"github.com/surveysync/surveysync/pipeline/files"
	"github.com/surveysync/surveysync/sink/parquet"
	"github.com/surveysync/surveysync/survey"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// idle keep-alive connections of the S3 SDK's HTTP client
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}

const czechName = "Přihláška – životopis.pdf"

// stores runs fn against file:// and, when versitygw is installed, S3.
func stores(t *testing.T, fn func(t *testing.T, st *Store)) {
	t.Run("file", func(t *testing.T) {
		st, _ := fileStore(t)
		fn(t, st)
	})
	t.Run("s3", func(t *testing.T) {
		v := blobtest.Start(t)
		fn(t, s3Store(t, v, "surveysync-files"))
	})
}

func testOptions(t testing.TB) Options {
	return Options{
		SpoolDir:      t.TempDir(),
		RetryInitial:  20 * time.Millisecond,
		RetryMax:      200 * time.Millisecond,
		IndexInterval: 100 * time.Millisecond,
		FlushInterval: 20 * time.Millisecond,
		Registerer:    prometheus.NewRegistry(),
	}
}

// runCopier runs c until the test ends.
func runCopier(t testing.TB, c *Copier) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	var once bool
	stop = func() {
		if !once {
			once = true
			cancel()
			<-done
		}
	}
	t.Cleanup(stop)
	return stop
}

func TestCopyByteIdentical(t *testing.T) {
	stores(t, func(t *testing.T, st *Store) {
		fs := newFileServer(t)
		sizes := []int64{0, 1, 50 << 10, 1<<20 + 1, 6<<20 + 12345}
		var refs []files.FileRef
		for i, size := range sizes {
			r := files.FileRef{SurveyID: 4574, ResponseID: guid(0xda453b67, 1), QuestionID: int64(10 + i), FileID: guid(0xf11e0000, i)}
			name := czechName
			if i == 1 {
				name = ""
			}
			fs.add(r.FileID, fileSpec{size: size, name: name, ctype: "application/pdf"})
			refs = append(refs, r)
		}
		opts := testOptions(t)
		c := NewCopier(st, fs.downloader(), nil, opts)
		for i, r := range refs {
			got, err := c.Copy(context.Background(), r)
			if err != nil {
				t.Fatalf("copy %d: %v", sizes[i], err)
			}
			want := sha256Of(r.FileID, sizes[i])
			if got.SHA256 != want || got.Size != sizes[i] || got.Skipped {
				t.Fatalf("copy %d: got %+v, want sha %s", sizes[i], got, want)
			}
			sum, n := readSHA(t, st, r.Key())
			if sum != want || n != sizes[i] {
				t.Fatalf("object %s: sha %s size %d, want %s %d", r.Key(), sum, n, want, sizes[i])
			}
			a, err := st.Attributes(context.Background(), r.Key())
			if err != nil {
				t.Fatal(err)
			}
			if a.ContentType != "application/pdf" || a.Metadata[MetaSHA256] != want || a.Metadata[MetaSize] != itoa(sizes[i]) ||
				a.Metadata[MetaFileID] != string(r.FileID) || a.Metadata[MetaResponseID] != string(r.ResponseID) {
				t.Errorf("attributes of %s: %+v", r.Key(), a)
			}
			wantName := czechName
			if i == 1 {
				wantName = ""
			}
			if a.Metadata[MetaFileName] != wantName || got.FileName != wantName {
				t.Errorf("file name: metadata %q, stored %q, want %q", a.Metadata[MetaFileName], got.FileName, wantName)
			}
			if wantName != "" && !strings.Contains(a.ContentDisposition, "filename*=UTF-8''P%C5%99ihl%C3%A1%C5%A1ka") {
				t.Errorf("Content-Disposition %q", a.ContentDisposition)
			}
			if want := st.ObjectURL(r.Key()); got.ObjectURL != want {
				t.Errorf("object url %q, want %q", got.ObjectURL, want)
			}
		}
		// The spool folder is left empty.
		if ents, _ := os.ReadDir(opts.SpoolDir); len(ents) != 0 {
			t.Errorf("spool folder not empty: %v", ents)
		}
	})
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// On S3, the raw metadata header is ASCII: values are percent-encoded.
func TestS3MetadataIsASCII(t *testing.T) {
	v := blobtest.Start(t)
	st := s3Store(t, v, "ascii")
	fs := newFileServer(t)
	r := ref(1, "aaaaaaaa-0000-4000-8000-000000000001", "bbbbbbbb-0000-4000-8000-000000000001")
	fs.add(r.FileID, fileSpec{size: 10, name: czechName, ctype: "application/pdf"})
	c := NewCopier(st, fs.downloader(), nil, testOptions(t))
	if _, err := c.Copy(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	client := st.b.(*s3Backend).client
	out, err := client.HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: aws.String("ascii"), Key: aws.String(r.Key())})
	if err != nil {
		t.Fatal(err)
	}
	raw := out.Metadata[MetaFileName]
	if raw != "P%C5%99ihl%C3%A1%C5%A1ka%20%E2%80%93%20%C5%BEivotopis.pdf" {
		t.Errorf("raw x-amz-meta-filename = %q", raw)
	}
	for _, c := range raw + aws.ToString(out.ContentDisposition) {
		if c > 0x7e {
			t.Fatalf("non-ASCII header value: %q / %q", raw, aws.ToString(out.ContentDisposition))
		}
	}
}

func TestCutDownloadLeavesNothingThenSucceeds(t *testing.T) {
	stores(t, func(t *testing.T, st *Store) {
		fs := newFileServer(t)
		for _, size := range []int64{200 << 10, 3 << 20} { // in memory, and spooled to a file
			r := ref(1, "aaaaaaaa-0000-4000-8000-000000000001", string(guid(0xc0700000, int(size))))
			fs.add(r.FileID, fileSpec{size: size, name: czechName})
			fs.cutNext(r.FileID, size/2)
			opts := testOptions(t)
			ix, err := parquet.OpenFileIndex(filepath.Join(t.TempDir(), "uploaded_files.db"))
			if err != nil {
				t.Fatal(err)
			}
			defer ix.Close()
			c := NewCopier(st, fs.downloader(), ix, opts)

			// One attempt on its own: it fails and leaves nothing.
			_, err = c.Copy(context.Background(), r)
			var ce *CopyError
			if !errors.As(err, &ce) || ce.Reason != ReasonDownload {
				t.Fatalf("cut copy: err %v, want a download CopyError", err)
			}
			if _, err := st.Attributes(context.Background(), r.Key()); !errors.Is(err, ErrNotExist) {
				t.Fatalf("after a cut download, attributes err = %v, want NotFound", err)
			}
			if ents, _ := os.ReadDir(opts.SpoolDir); len(ents) != 0 {
				t.Errorf("spool folder not empty: %v", ents)
			}

			// Through the queue: the first attempt is cut, a retry stores it.
			fs.cutNext(r.FileID, size/3)
			stop := runCopier(t, c)
			c.Enqueue(r)
			waitFor(t, 10*time.Second, "file stored", func() bool { rec, ok := ix.Get(r); return ok && rec.Stored() })
			stop()
			rec, _ := ix.Get(r)
			if want := sha256Of(r.FileID, size); rec.SHA256 != want || rec.Attempts != 1 {
				t.Errorf("index row %+v, want sha %s after 1 failed attempt", rec, want)
			}
			if sum, _ := readSHA(t, st, r.Key()); sum != rec.SHA256 {
				t.Errorf("stored sha %s, index %s", sum, rec.SHA256)
			}
			if got := testutil.ToFloat64(c.m.failures.WithLabelValues(ReasonDownload)); got != 1 {
				t.Errorf("download failures = %v, want 1", got)
			}
		}
	})
}

func TestRerunCopiesNothing(t *testing.T) {
	stores(t, func(t *testing.T, st *Store) {
		fs := newFileServer(t)
		resp := responseWithFiles(fs, 4574, guid(0xabc00000, 1), 12, 40<<10)
		ixPath := filepath.Join(t.TempDir(), "uploaded_files.db")
		run := func() (*Copier, *parquet.FileIndex) {
			ix, err := parquet.OpenFileIndex(ixPath)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ix.Close() })
			c := NewCopier(st, fs.downloader(), ix, testOptions(t))
			stop := runCopier(t, c)
			c.HandleResponse(context.Background(), resp)
			c.HandleResponse(context.Background(), resp) // the same response read twice
			waitFor(t, 10*time.Second, "copier idle", c.Idle)
			stop()
			return c, ix
		}
		c1, ix := run()
		if got := testutil.ToFloat64(c1.m.copied); got != 12 {
			t.Fatalf("first run copied %v, want 12", got)
		}
		for _, r := range files.FindFiles(resp, nil) {
			rec, ok := ix.Get(r)
			if !ok || !rec.Stored() || rec.SHA256 != sha256Of(r.FileID, 40<<10) || rec.Size != 40<<10 {
				t.Fatalf("index row of %s: %+v", r.Key(), rec)
			}
		}
		ix.Close()
		downloads := fs.requests.Load()
		c2, _ := run()
		if got := testutil.ToFloat64(c2.m.copied); got != 0 {
			t.Errorf("second run copied %v files, want 0", got)
		}
		if got := testutil.ToFloat64(c2.m.skipped); got != 12 {
			t.Errorf("second run skipped %v files, want 12", got)
		}
		if n := fs.requests.Load() - downloads; n != 0 {
			t.Errorf("second run made %d download requests, want 0", n)
		}
	})
}

// responseWithFiles builds a response with n uploaded files of size bytes
// (two per upload answer, comma-separated) and registers them on fs.
func responseWithFiles(fs *fileServer, surveyID int64, rid survey.GUID, n int, size int64) *survey.Response {
	r := &survey.Response{ResponseID: rid, SurveyID: surveyID, ResponseStatus: survey.StatusCompleted}
	q := survey.Question{ID: 77, Type: "file_upload"}
	for i := 0; i < n; i += 2 {
		var ids []string
		for j := i; j < min(i+2, n); j++ {
			id := guid(uint32(surveyID), int(rid[7])<<20|j)
			fs.add(id, fileSpec{size: size, name: czechName, ctype: "application/pdf"})
			ids = append(ids, string(id))
		}
		q.Answers = append(q.Answers, survey.Answer{Text: survey.Str(strings.Join(ids, ", "))})
	}
	r.Pages = []survey.Page{{ID: 1, Questions: []survey.Question{q, {ID: 78, Type: "essay", Answers: []survey.Answer{{Text: survey.Str("hello")}}}}}}
	return r
}

func TestSizeCap(t *testing.T) {
	st, _ := fileStore(t)
	fs := newFileServer(t)
	r := ref(1, "aaaaaaaa-0000-4000-8000-000000000001", "bbbbbbbb-0000-4000-8000-000000000002")
	fs.add(r.FileID, fileSpec{size: 100 << 10})
	opts := testOptions(t)
	opts.MaxSize = 64 << 10
	ix, _ := parquet.OpenFileIndex(filepath.Join(t.TempDir(), "ix.db"))
	defer ix.Close()
	c := NewCopier(st, fs.downloader(), ix, opts)
	_, err := c.Copy(context.Background(), r)
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "102400 > 65536") || permanent.Reason(err) != "too_large" {
		t.Fatalf("err = %v, want a permanent ErrTooLarge naming the sizes", err)
	}
	// Without Content-Length the cap is enforced while streaming.
	dl := DownloadFunc(func(ctx context.Context, s int64, rid, fid survey.GUID) (*Download, error) {
		d, err := fs.downloader().DownloadFile(ctx, s, rid, fid)
		if d != nil {
			d.Size = -1
		}
		return d, err
	})
	opts.Registerer = prometheus.NewRegistry()
	c2 := NewCopier(st, dl, ix, opts)
	if _, err := c2.Copy(context.Background(), r); !errors.Is(err, ErrTooLarge) || !permanent.Is(err) {
		t.Fatalf("streamed err = %v, want ErrTooLarge", err)
	}
	// Through Run: recorded with its error, not retried in this run.
	stop := runCopier(t, c)
	c.Enqueue(r)
	waitFor(t, 5*time.Second, "failure recorded", func() bool { rec, ok := ix.Get(r); return ok && rec.Error != "" })
	reqs := fs.requests.Load()
	time.Sleep(100 * time.Millisecond)
	stop()
	rec, _ := ix.Get(r)
	if rec.Attempts != 1 || !strings.Contains(rec.Error, "size cap") {
		t.Errorf("index row %+v", rec)
	}
	if fs.requests.Load() != reqs {
		t.Errorf("a too-large file was retried at once")
	}
	if _, err := st.Attributes(context.Background(), r.Key()); !errors.Is(err, ErrNotExist) {
		t.Errorf("too-large file stored: %v", err)
	}
}

func TestNotFoundIsPermanent(t *testing.T) {
	st, _ := fileStore(t)
	fs := newFileServer(t)
	ix, _ := parquet.OpenFileIndex(filepath.Join(t.TempDir(), "ix.db"))
	defer ix.Close()
	c := NewCopier(st, fs.downloader(), ix, testOptions(t))
	r := ref(1, "aaaaaaaa-0000-4000-8000-000000000001", "bbbbbbbb-0000-4000-8000-00000000dead")
	stop := runCopier(t, c)
	c.Enqueue(r)
	waitFor(t, 5*time.Second, "failure recorded", func() bool { rec, ok := ix.Get(r); return ok && rec.Error != "" })
	stop()
	if got := testutil.ToFloat64(c.m.failures.WithLabelValues(ReasonNotFound)); got != 1 {
		t.Errorf("not_found failures = %v", got)
	}
	// Discovery in the same run does not retry it; the index reload does, with backoff.
	c.Enqueue(r)
	if c.QueueDepth() != 0 {
		t.Errorf("a settled file was queued again")
	}
}

func TestServerErrorsRetried(t *testing.T) {
	st, _ := fileStore(t)
	fs := newFileServer(t)
	ix, _ := parquet.OpenFileIndex(filepath.Join(t.TempDir(), "ix.db"))
	defer ix.Close()
	c := NewCopier(st, fs.downloader(), ix, testOptions(t))
	r := ref(1, "aaaaaaaa-0000-4000-8000-000000000001", "bbbbbbbb-0000-4000-8000-000000000003")
	fs.add(r.FileID, fileSpec{size: 1000})
	fs.mu.Lock()
	fs.fail[r.FileID] = 3
	fs.mu.Unlock()
	stop := runCopier(t, c)
	c.Enqueue(r)
	waitFor(t, 10*time.Second, "stored", func() bool { rec, ok := ix.Get(r); return ok && rec.Stored() })
	stop()
	if rec, _ := ix.Get(r); rec.Attempts != 3 {
		t.Errorf("attempts = %d, want 3", rec.Attempts)
	}
}

func TestQueueFullDefersToIndex(t *testing.T) {
	st, _ := fileStore(t)
	fs := newFileServer(t)
	ix, _ := parquet.OpenFileIndex(filepath.Join(t.TempDir(), "ix.db"))
	defer ix.Close()
	opts := testOptions(t)
	opts.QueueSize = 3
	c := NewCopier(st, fs.downloader(), ix, opts)
	resp := responseWithFiles(fs, 9, guid(0x12300000, 2), 10, 1000)
	c.HandleResponse(context.Background(), resp) // not running: 3 queued, 7 deferred
	if got := testutil.ToFloat64(c.m.failures.WithLabelValues(ReasonQueueFull)); got != 7 {
		t.Fatalf("queue_full = %v, want 7", got)
	}
	runCopier(t, c)
	waitFor(t, 10*time.Second, "all stored", func() bool {
		for _, r := range files.FindFiles(resp, nil) {
			if rec, ok := ix.Get(r); !ok || !rec.Stored() {
				return false
			}
		}
		return true
	})
}

func TestShutdownRecordsPendingAndRestartCopiesThem(t *testing.T) {
	st, _ := fileStore(t)
	fs := newFileServer(t)
	ixPath := filepath.Join(t.TempDir(), "ix.db")
	ix, _ := parquet.OpenFileIndex(ixPath)
	resp := responseWithFiles(fs, 9, guid(0x45600000, 3), 6, 1000)
	c := NewCopier(st, fs.downloader(), ix, testOptions(t))
	c.HandleResponse(context.Background(), resp)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c.Run(ctx) // stops at once: the queued files become pending rows
	pending, _ := ix.Pending(context.Background(), 0)
	if len(pending) != 6 {
		t.Fatalf("pending after shutdown = %d, want 6", len(pending))
	}
	ix.Close()

	ix2, err := parquet.OpenFileIndex(ixPath)
	if err != nil {
		t.Fatal(err)
	}
	defer ix2.Close()
	c2 := NewCopier(st, fs.downloader(), ix2, testOptions(t))
	runCopier(t, c2)
	waitFor(t, 10*time.Second, "pending copied after restart", func() bool {
		p, _ := ix2.Pending(context.Background(), 0)
		return len(p) == 0 && testutil.ToFloat64(c2.m.copied) == 6
	})
}

func TestMarkDeleted(t *testing.T) {
	for _, remove := range []bool{false, true} {
		t.Run(map[bool]string{false: "mark", true: "remove"}[remove], func(t *testing.T) {
			st, _ := fileStore(t)
			fs := newFileServer(t)
			ix, _ := parquet.OpenFileIndex(filepath.Join(t.TempDir(), "ix.db"))
			defer ix.Close()
			opts := testOptions(t)
			opts.DeleteWithResponse = remove
			c := NewCopier(st, fs.downloader(), ix, opts)
			runCopier(t, c)
			resp := responseWithFiles(fs, 5, guid(0x78900000, 4), 3, 500)
			other := responseWithFiles(fs, 5, guid(0x78900000, 5), 1, 500)
			c.HandleResponse(context.Background(), resp)
			c.HandleResponse(context.Background(), other)
			waitFor(t, 5*time.Second, "stored", c.Idle)
			deleted := *resp
			deleted.ResponseStatus = survey.StatusDeleted
			deleted.Pages = nil
			c.HandleResponse(context.Background(), &deleted)
			waitFor(t, 5*time.Second, "marked", func() bool {
				recs, _ := ix.FilesOf(context.Background(), 5, resp.ResponseID)
				for _, r := range recs {
					if !r.Deleted {
						return false
					}
				}
				return len(recs) == 3 && c.Idle()
			})
			for _, r := range files.FindFiles(resp, nil) {
				_, err := st.Attributes(context.Background(), r.Key())
				if remove != errors.Is(err, ErrNotExist) {
					t.Errorf("DeleteWithResponse=%v: object %s attributes err %v", remove, r.Key(), err)
				}
			}
			for _, r := range files.FindFiles(other, nil) {
				if rec, _ := ix.Get(r); !rec.Stored() {
					t.Errorf("another response's file was touched: %+v", rec)
				}
			}
		})
	}
}

// The S3 server goes away for a while: copies fail, are retried, and every
// file arrives once it is back.
func TestS3OutageLosesNothing(t *testing.T) {
	v := blobtest.Start(t)
	st := s3Store(t, v, "outage")
	fs := newFileServer(t)
	ix, _ := parquet.OpenFileIndex(filepath.Join(t.TempDir(), "ix.db"))
	defer ix.Close()
	opts := testOptions(t)
	c := NewCopier(st, fs.downloader(), ix, opts)
	runCopier(t, c)
	first := responseWithFiles(fs, 3, guid(0xaaa00000, 6), 4, 30<<10)
	c.HandleResponse(context.Background(), first)
	waitFor(t, 10*time.Second, "first batch stored", c.Idle)

	v.Stop()
	second := responseWithFiles(fs, 3, guid(0xaaa00000, 7), 6, 2<<20)
	c.HandleResponse(context.Background(), second)
	waitFor(t, 10*time.Second, "failures while S3 is down", func() bool {
		return testutil.ToFloat64(c.m.failures.WithLabelValues(ReasonStore)) >= 6
	})
	time.Sleep(300 * time.Millisecond)
	v.Restart(t)
	waitFor(t, 20*time.Second, "every file stored after the outage", func() bool {
		for _, r := range append(files.FindFiles(first, nil), files.FindFiles(second, nil)...) {
			if rec, ok := ix.Get(r); !ok || !rec.Stored() {
				return false
			}
		}
		return true
	})
	for _, r := range files.FindFiles(second, nil) {
		if sum, n := readSHA(t, st, r.Key()); sum != sha256Of(r.FileID, 2<<20) || n != 2<<20 {
			t.Errorf("%s: sha %s size %d after the outage", r.Key(), sum, n)
		}
	}
}

// discoveringIndex is a JSONL index that also reports files "named in
// stored answers" (the ClickHouse index's files.Discoverer).
type discoveringIndex struct {
	*parquet.FileIndex
	refs []files.FileRef
}

func (d *discoveringIndex) Undiscovered(ctx context.Context, typeMatch []string, limit int) ([]files.FileRef, error) {
	var out []files.FileRef
	for _, r := range d.refs {
		if _, ok := d.Get(r); !ok {
			out = append(out, r)
		}
	}
	return out, nil
}

func TestDiscoveredFilesAreCopied(t *testing.T) {
	st, _ := fileStore(t)
	fs := newFileServer(t)
	jx, _ := parquet.OpenFileIndex(filepath.Join(t.TempDir(), "ix.db"))
	defer jx.Close()
	resp := responseWithFiles(fs, 8, guid(0xd15c0000, 1), 5, 700)
	ix := &discoveringIndex{FileIndex: jx, refs: files.FindFiles(resp, nil)}
	c := NewCopier(st, fs.downloader(), ix, testOptions(t))
	runCopier(t, c)
	waitFor(t, 10*time.Second, "discovered files stored", func() bool {
		for _, r := range ix.refs {
			if rec, ok := jx.Get(r); !ok || !rec.Stored() {
				return false
			}
		}
		return true
	})
}

func TestMetricsLint(t *testing.T) {
	reg := prometheus.NewRegistry()
	newMetrics(reg)
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("metric %s: %s", p.Metric, p.Text)
	}
}

func TestDrainedIgnoresWaitingRetries(t *testing.T) {
	st, _ := fileStore(t)
	fs := newFileServer(t)
	ix, _ := parquet.OpenFileIndex(filepath.Join(t.TempDir(), "ix.db"))
	defer ix.Close()
	opts := testOptions(t)
	opts.RetryInitial = time.Hour
	c := NewCopier(st, fs.downloader(), ix, opts)
	r := ref(1, "aaaaaaaa-0000-4000-8000-000000000001", "bbbbbbbb-0000-4000-8000-000000000004")
	fs.add(r.FileID, fileSpec{size: 10})
	fs.mu.Lock()
	fs.fail[r.FileID] = 1
	fs.mu.Unlock()
	runCopier(t, c)
	c.Enqueue(r)
	waitFor(t, 5*time.Second, "the failure recorded and waiting for its retry", func() bool {
		rec, ok := ix.Get(r)
		return ok && rec.Error != "" && c.Drained()
	})
	if c.Idle() {
		t.Error("Idle with a retry waiting")
	}
	if c.QueueDepth() != 1 {
		t.Errorf("queue depth %d, want 1 (the waiting retry)", c.QueueDepth())
	}
}

func TestVerifyExisting(t *testing.T) {
	st, _ := fileStore(t)
	fs := newFileServer(t)
	r := ref(1, "aaaaaaaa-0000-4000-8000-000000000001", "bbbbbbbb-0000-4000-8000-000000000005")
	fs.add(r.FileID, fileSpec{size: 4000, name: czechName})
	c := NewCopier(st, fs.downloader(), nil, testOptions(t))
	if _, err := c.Copy(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	opts := testOptions(t)
	opts.VerifyExisting = true
	v := NewCopier(st, fs.downloader(), nil, opts)
	reqs := fs.requests.Load()
	got, err := v.Copy(context.Background(), r)
	if err != nil || !got.Skipped {
		t.Fatalf("same size: %+v, %v; want skipped", got, err)
	}
	if fs.requests.Load() != reqs+1 {
		t.Errorf("VerifyExisting made %d requests, want 1", fs.requests.Load()-reqs)
	}
	// The service now serves another size: the object is written again.
	fs.add(r.FileID, fileSpec{size: 5000, name: czechName})
	got, err = v.Copy(context.Background(), r)
	if err != nil || got.Skipped || got.Size != 5000 || got.SHA256 != sha256Of(r.FileID, 5000) {
		t.Fatalf("changed size: %+v, %v; want a new copy", got, err)
	}
	if sum, n := readSHA(t, st, r.Key()); n != 5000 || sum != got.SHA256 {
		t.Errorf("object: %d bytes, sha %s", n, sum)
	}
}

// failingReaderAt yields n bytes, then an error.
type failingReaderAt struct{ n int64 }

func (r failingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off >= r.n {
		return 0, errBoom
	}
	k := min(int64(len(p)), r.n-off)
	clear(p[:k])
	if k < int64(len(p)) {
		return int(k), errBoom
	}
	return int(k), nil
}

// A write that fails midway is aborted: nothing under the key, no
// temporary file left. On S3 the body is bigger than the single-PUT limit
// (lowered for the test), so a multipart upload was under way.
func TestWriterAbortLeavesNothing(t *testing.T) {
	check := func(t *testing.T, st *Store) {
		r := ref(1, "aaaaaaaa-0000-4000-8000-000000000001", "bbbbbbbb-0000-4000-8000-000000000006")
		err := st.put(context.Background(), r.Key(), failingReaderAt{n: 12 << 20}, 20<<20,
			Attributes{ContentType: "application/pdf", Metadata: map[string]string{MetaSHA256: strings.Repeat("0", 64)}}, parts{size: 5 << 20, concurrency: 2})
		if err == nil {
			t.Fatal("put of a failing body succeeded")
		}
		if _, err := st.Attributes(context.Background(), r.Key()); !errors.Is(err, ErrNotExist) {
			t.Fatalf("attributes after an aborted write: %v, want ErrNotExist", err)
		}
	}
	t.Run("file", func(t *testing.T) {
		st, dir := fileStore(t)
		check(t, st)
		var left []string
		filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				left = append(left, p)
			}
			return nil
		})
		if len(left) != 0 {
			t.Errorf("files left after an aborted write: %v", left)
		}
	})
	t.Run("s3", func(t *testing.T) {
		v := blobtest.Start(t)
		st := s3Store(t, v, "abort")
		st.b.(*s3Backend).singlePut = 5 << 20
		check(t, st)
		out, err := st.b.(*s3Backend).client.ListMultipartUploads(context.Background(), &s3.ListMultipartUploadsInput{Bucket: aws.String("abort")})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Uploads) != 0 {
			t.Errorf("%d multipart uploads left after an aborted write", len(out.Uploads))
		}
	})
}

// cancellingReaderAt cancels the upload's context once after bytes have
// been read.
type cancellingReaderAt struct {
	*bytes.Reader
	after  int64
	read   atomic.Int64
	cancel func()
	once   sync.Once
}

func (r *cancellingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	n, err := r.Reader.ReadAt(p, off)
	if r.read.Add(int64(n)) >= r.after {
		r.once.Do(func() {
			r.cancel()
			time.Sleep(20 * time.Millisecond)
		})
	}
	return n, err
}

// A direct S3 PUT cancelled midway leaves no object.
func TestS3PutCancelledLeavesNothing(t *testing.T) {
	v := blobtest.Start(t)
	st := s3Store(t, v, "cancel")
	r := ref(1, "aaaaaaaa-0000-4000-8000-000000000001", "bbbbbbbb-0000-4000-8000-000000000007")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	body := &cancellingReaderAt{Reader: bytes.NewReader(make([]byte, 8<<20)), after: 2 << 20, cancel: cancel}
	err := st.Put(ctx, r.Key(), body, 8<<20, Attributes{ContentType: "application/pdf", Metadata: map[string]string{MetaSHA256: strings.Repeat("0", 64)}})
	if err == nil {
		t.Fatal("cancelled PUT succeeded")
	}
	if _, err := st.Attributes(context.Background(), r.Key()); !errors.Is(err, ErrNotExist) {
		t.Fatalf("attributes after a cancelled PUT: %v, want ErrNotExist", err)
	}
}

// A download error marked with internal/permanent is permanent without
// Options.IsPermanent: recorded with the prefix, not retried in this run;
// the size cap's error is a permanent.Error too.
func TestSharedPermanentErrorIsPermanent(t *testing.T) {
	st, _ := fileStore(t)
	ix, _ := parquet.OpenFileIndex(filepath.Join(t.TempDir(), "ix.db"))
	defer ix.Close()
	var calls atomic.Int64
	dl := DownloadFunc(func(ctx context.Context, s int64, rid, fid survey.GUID) (*Download, error) {
		calls.Add(1)
		return nil, permanent.Errorf("decode", "download %s: malformed answer", fid)
	})
	opts := testOptions(t)
	opts.IsPermanent = nil
	c := NewCopier(st, dl, ix, opts)
	r := ref(1, "aaaaaaaa-0000-4000-8000-000000000001", "bbbbbbbb-0000-4000-8000-000000000009")
	stop := runCopier(t, c)
	c.Enqueue(r)
	waitFor(t, 5*time.Second, "failure recorded", func() bool { rec, ok := ix.Get(r); return ok && rec.Error != "" })
	time.Sleep(100 * time.Millisecond)
	stop()
	rec, _ := ix.Get(r)
	if !strings.HasPrefix(rec.Error, permanentPrefix) || calls.Load() != 1 {
		t.Errorf("index row %+v after %d calls: want one call and a permanent error", rec, calls.Load())
	}
}
