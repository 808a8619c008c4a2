package surveyapi

import (
	"context"
	"crypto/sha256"
	"errors"
	"hash"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/surveysync/surveysync/survey"
)

// pattern fills a chunk deterministically; the 50 MB file is this chunk
// repeated, generated while serving (never held whole in memory).
func pattern() []byte {
	b := make([]byte, 64<<10)
	for i := range b {
		b[i] = byte(i*7 + i>>8)
	}
	return b
}

func TestDownload50MBMemoryFlat(t *testing.T) {
	const size = 50 << 20
	chunk := pattern()
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/pdf")
		w.Header().Set("Content-Disposition", `attachment; filename="zluty.pdf"; filename*=UTF-8''%C5%BElu%C5%A5ou%C4%8Dk%C3%BD%20k%C5%AF%C5%88.pdf`)
		w.Header().Set("Content-Length", strconv.Itoa(size))
		for n := 0; n < size; n += len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	h := newClient(t, s.URL, nil)

	want := sha256.New()
	for n := 0; n < size; n += len(chunk) {
		want.Write(chunk)
	}
	got := sha256.New()
	buf := make([]byte, 32<<10)

	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f, err := h.c.DownloadFile(context.Background(), 4574, testRID, testFID)
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.CopyBuffer(struct{ hash.Hash }{got}, f.Body, buf) // hide ReaderFrom/WriterTo: use our buffer
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Body.Close(); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)

	if n != size || f.Size != size {
		t.Errorf("read %d bytes, Size %d, want %d", n, f.Size, size)
	}
	if string(got.Sum(nil)) != string(want.Sum(nil)) {
		t.Error("content differs")
	}
	if f.FileName != "žluťoučký kůň.pdf" || f.ContentType != "application/pdf" {
		t.Errorf("file name %q, content type %q", f.FileName, f.ContentType)
	}
	// Client and server run in this process: both are in the figure.
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("50 MB download: TotalAlloc %d KB, HeapInuse %d → %d KB", alloc>>10, before.HeapInuse>>10, after.HeapInuse>>10)
	if alloc > 2<<20 {
		t.Errorf("allocated %d bytes for a 50 MB download: not streaming", alloc)
	}
}

func TestDownloadReleasesSlotAfterHeaders(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/surveys/4574/responses/"+testRID {
			w.Write(responseJSON(testRID))
			return
		}
		w.Header().Set("Content-Type", "image/png")
		w.Write(make([]byte, 1<<10))
		http.NewResponseController(w).Flush()
		waitOrDone(r, 5*time.Second) // the rest never comes
	})
	h := newClient(t, s.URL, func(o *Options) { o.MaxConcurrency = 1; o.Timeout = 150 * time.Millisecond })
	f, err := h.c.DownloadFile(context.Background(), 4574, testRID, testFID)
	if err != nil {
		t.Fatal(err)
	}
	if f.Size != -1 || f.FileName != "" {
		t.Errorf("size %d name %q", f.Size, f.FileName)
	}
	// The open download holds no slot: another call gets through.
	if _, err := h.c.GetResponse(context.Background(), 4574, testRID); err != nil {
		t.Fatal(err)
	}
	// A stalled body fails with a timeout after Options.Timeout of no data.
	t0 := time.Now()
	n, err := io.Copy(io.Discard, f.Body)
	if !errors.Is(err, ErrTimeout) || n != 1<<10 {
		t.Errorf("read %d, err %v", n, err)
	}
	if el := time.Since(t0); el < 140*time.Millisecond || el > time.Second {
		t.Errorf("stall detected after %v", el)
	}
	f.Body.Close()
}

func TestDownloadSlowConsumerIsNotAStall(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Write(make([]byte, 128<<10))
	})
	h := newClient(t, s.URL, func(o *Options) { o.Timeout = 200 * time.Millisecond })
	f, err := h.c.DownloadFile(context.Background(), 4574, testRID, testFID)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Body.Close()
	buf := make([]byte, 64<<10)
	total := 0
	for {
		n, err := f.Body.Read(buf)
		total += n
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("after %d bytes: %v", total, err)
		}
		time.Sleep(250 * time.Millisecond) // the caller is slower than the timeout, the server is not
	}
	if total != 128<<10 {
		t.Errorf("read %d", total)
	}
}

func TestDownloadErrorsAndRetry(t *testing.T) {
	var n atomic.Int64
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch n.Add(1) {
		case 1:
			writeJSON(w, 503, errorBody("req-Ser", 503, "busy"))
		case 2:
			w.Header().Set("Content-Type", "text/csv")
			w.Header().Set("Content-Disposition", `attachment; filename=export 2026.csv`)
			w.Write([]byte("a,b\n1,2\n"))
		default:
			writeJSON(w, 404, errorBody("req-Not", 404, "File not found"))
		}
	})
	h := newClient(t, s.URL, nil)
	f, err := h.c.DownloadFile(context.Background(), 4574, testRID, testFID)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(f.Body)
	f.Body.Close()
	if string(b) != "a,b\n1,2\n" || f.FileName != "export 2026.csv" || f.ContentType != "text/csv" {
		t.Errorf("body %q name %q type %q", b, f.FileName, f.ContentType)
	}
	_, err = h.c.DownloadFile(context.Background(), 4574, testRID, testFID)
	if !errors.Is(err, survey.ErrNotFound) {
		t.Errorf("err = %v", err)
	}
	if _, err := h.c.DownloadFile(context.Background(), 4574, testRID, "nope"); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("bad file id: %v", err)
	}
	if h.c.Count(OpDownloadFile, OutcomeServerError) != 1 || h.c.Count(OpDownloadFile, OutcomeOK) != 1 || h.c.Count(OpDownloadFile, OutcomeNotFound) != 1 {
		t.Errorf("counts = %+v", h.c.Stats().Requests)
	}
}

func TestFileName(t *testing.T) {
	for cd, want := range map[string]string{
		``:                                  "",
		`attachment`:                        "",
		`attachment; filename="report.pdf"`: "report.pdf",
		`inline; filename=report.pdf`:       "report.pdf",
		`attachment; filename*=UTF-8''%E2%82%AC%20rates.pdf`:                           "€ rates.pdf",
		`attachment; filename*=utf-8''x%20y.pdf; filename="fallback.pdf"`:              "x y.pdf",
		`attachment; filename="fallback.pdf"; filename*=UTF-8''P%C5%99%C3%ADloha.docx`: "Příloha.docx",
		`attachment; filename="../../etc/passwd"`:                                      "passwd",
		`attachment; filename="C:\\Users\\x\\cv.pdf"`:                                  "cv.pdf",
		`attachment; filename=my file.pdf`:                                             "my file.pdf",
		`attachment; filename*=UTF-8''my%20f%C3%ADle.pdf; broken`:                      "my fíle.pdf",
		`attachment; filename=".."`:                                                    "",
	} {
		if got := fileName(cd); got != want {
			t.Errorf("fileName(%q) = %q, want %q", cd, got, want)
		}
	}
}
