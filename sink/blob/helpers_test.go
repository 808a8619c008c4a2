package blob

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"mime"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/surveysync/surveysync/internal/testkit/blobtest"
	"github.com/surveysync/surveysync/pipeline/files"
	"github.com/surveysync/surveysync/survey"
)

// ---- a file server shaped like spec §4.5 ----

type fileSpec struct {
	size  int64
	name  string
	ctype string
}

// fileServer serves GET /surveys/{sid}/responses/{rid}/uploaded-files/{fid}
// with deterministic bytes (a ChaCha8 stream seeded by the file id), the
// file's name in Content-Disposition (RFC 5987) and its Content-Length.
// cut[fid] = n makes the next download of fid break off after n bytes.
type fileServer struct {
	srv       *httptest.Server
	mu        sync.Mutex
	files     map[survey.GUID]fileSpec
	cut       map[survey.GUID]int64
	fail      map[survey.GUID]int // answer 503 this many more times
	requests  atomic.Int64
	completed atomic.Int64
}

func newFileServer(t testing.TB) *fileServer {
	fs := &fileServer{files: map[survey.GUID]fileSpec{}, cut: map[survey.GUID]int64{}, fail: map[survey.GUID]int{}}
	fs.srv = httptest.NewServer(http.HandlerFunc(fs.serve))
	t.Cleanup(fs.srv.Close)
	return fs
}

func (fs *fileServer) add(id survey.GUID, spec fileSpec) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.files[id] = spec
}

func (fs *fileServer) cutNext(id survey.GUID, after int64) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.cut[id] = after
}

func contentOf(id survey.GUID, size int64) io.Reader {
	var seed [32]byte
	copy(seed[:], id)
	binary.LittleEndian.PutUint64(seed[24:], uint64(size))
	return io.LimitReader(rand.NewChaCha8(seed), size)
}

func sha256Of(id survey.GUID, size int64) string {
	h := sha256.New()
	io.Copy(h, contentOf(id, size))
	return hex.EncodeToString(h.Sum(nil))
}

func (fs *fileServer) serve(w http.ResponseWriter, r *http.Request) {
	fs.requests.Add(1)
	seg := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	if len(seg) != 6 || seg[0] != "surveys" || seg[2] != "responses" || seg[4] != "uploaded-files" {
		http.NotFound(w, r)
		return
	}
	id, err := survey.ParseGUID(seg[5])
	if err != nil {
		http.NotFound(w, r)
		return
	}
	fs.mu.Lock()
	spec, ok := fs.files[id]
	cut, doCut := fs.cut[id]
	delete(fs.cut, id)
	failing := fs.fail[id] > 0
	if failing {
		fs.fail[id]--
	}
	fs.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	if failing {
		http.Error(w, "busy", http.StatusServiceUnavailable)
		return
	}
	if spec.ctype != "" {
		w.Header().Set("Content-Type", spec.ctype)
	}
	if spec.name != "" {
		w.Header().Set("Content-Disposition", "attachment; filename*=UTF-8''"+rfc5987(spec.name))
	}
	w.Header().Set("Content-Length", strconv.FormatInt(spec.size, 10))
	body := contentOf(id, spec.size)
	if doCut {
		io.CopyN(w, body, cut)
		w.(http.Flusher).Flush()
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
		return
	}
	if _, err := io.Copy(w, body); err == nil {
		fs.completed.Add(1)
	}
}

// httpDownloader is a minimal client of the download endpoint (the real one
// is source/surveyapi, wired by cmd).
type httpDownloader struct {
	base   string
	client *http.Client
}

func (fs *fileServer) downloader() *httpDownloader {
	return &httpDownloader{base: fs.srv.URL, client: fs.srv.Client()}
}

func (d *httpDownloader) DownloadFile(ctx context.Context, surveyID int64, responseID, fileID survey.GUID) (*Download, error) {
	u := fmt.Sprintf("%s/surveys/%d/responses/%s/uploaded-files/%s", d.base, surveyID, responseID, fileID)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := d.client.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		if resp.StatusCode == http.StatusNotFound {
			return nil, fmt.Errorf("download %s: %w", fileID, survey.ErrNotFound)
		}
		return nil, fmt.Errorf("download %s: HTTP %d", fileID, resp.StatusCode)
	}
	var name string
	if _, params, err := mime.ParseMediaType(resp.Header.Get("Content-Disposition")); err == nil {
		name = params["filename"]
	}
	return &Download{Body: resp.Body, ContentType: resp.Header.Get("Content-Type"), FileName: name, Size: resp.ContentLength}, nil
}

// ---- stores ----

func fileStore(t testing.TB) (*Store, string) {
	dir := filepath.Join(t.TempDir(), "files")
	st, err := OpenStore(context.Background(), StoreOptions{URL: "file://" + dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st, dir
}

// s3Store opens a fresh bucket on v.
func s3Store(t testing.TB, v *blobtest.Versity, bucket string) *Store {
	v.CreateBucket(t, bucket)
	st, err := OpenStore(context.Background(), StoreOptions{URL: v.URL(bucket), AccessKey: blobtest.AccessKey, SecretKey: blobtest.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// ---- helpers ----

func ref(survey_ int64, rid, fid string) files.FileRef {
	return files.FileRef{SurveyID: survey_, ResponseID: survey.MustGUID(rid), QuestionID: 7, FileID: survey.MustGUID(fid)}
}

func guid(prefix uint32, n int) survey.GUID {
	return survey.GUID(fmt.Sprintf("%08x-0000-4000-8000-%012x", prefix, n))
}

// readSHA reads an object back and hashes it.
func readSHA(t testing.TB, st *Store, key string) (string, int64) {
	t.Helper()
	r, err := st.NewReader(context.Background(), key)
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	defer r.Close()
	h := sha256.New()
	n, err := io.Copy(h, r)
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var errBoom = errors.New("boom")
