package blob

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/surveysync/surveysync/pipeline/files"
	"github.com/surveysync/surveysync/survey"
)

// Download is an uploaded file as the API serves it (docs/api.md §4.5). The copier
// closes Body.
type Download struct {
	Body        io.ReadCloser
	ContentType string // from Content-Type; "" when none came
	FileName    string // from Content-Disposition, UTF-8; "" when none came
	Size        int64  // from Content-Length; <= 0 when unknown
}

// Downloader fetches an uploaded file. The API client retries inside (its
// policy: 429, 5xx, network errors); the copier retries what still fails,
// and any body that breaks off mid-stream, on later passes.
type Downloader interface {
	DownloadFile(ctx context.Context, surveyID int64, responseID, fileID survey.GUID) (*Download, error)
}

// DownloadFunc adapts a function to Downloader (cmd wraps the API client's
// DownloadFile with it).
type DownloadFunc func(ctx context.Context, surveyID int64, responseID, fileID survey.GUID) (*Download, error)

// DownloadFile calls f.
func (f DownloadFunc) DownloadFile(ctx context.Context, surveyID int64, responseID, fileID survey.GUID) (*Download, error) {
	return f(ctx, surveyID, responseID, fileID)
}

var (
	// ErrTooLarge is matched by the error of a file bigger than Options.MaxSize.
	ErrTooLarge = errors.New("file larger than the configured size cap")
	// ErrTruncated is matched by the error of a download that ended before
	// its Content-Length.
	ErrTruncated = errors.New("download ended before its Content-Length")
)

// CopyError is the error of a failed copy: what failed (Reason, one of the
// Reason* constants) and where.
type CopyError struct {
	Ref    files.FileRef
	Reason string
	Err    error
}

func (e *CopyError) Error() string {
	return fmt.Sprintf("copy file %s (%s): %v", e.Ref.Key(), e.Reason, e.Err)
}

func (e *CopyError) Unwrap() error { return e.Err }

// Stored describes a file that is in the store.
type Stored struct {
	files.FileRef
	ObjectURL   string
	FileName    string
	ContentType string
	Size        int64
	SHA256      string
	Skipped     bool // it was already there: nothing was downloaded or written
}

// Options tune the copier. Zero values take the defaults noted.
type Options struct {
	MaxConcurrency int   // files copied at once (4)
	MaxSize        int64 // size cap in bytes (1 GiB); a bigger file fails with ErrTooLarge; < 0: no cap
	QueueSize      int   // files waiting in memory (10 000); more are deferred to the index
	// MemSpool is how much of one download is held in memory before it is
	// spooled to a temporary file in SpoolDir (1 MiB).
	MemSpool int
	SpoolDir string // temporary files ("": os.TempDir())
	// PartSize and PartConcurrency shape uploads to S3 of files over
	// 5 GiB, which go up in parts: PartSize bytes each (5 MiB, S3's
	// minimum; more when 10 000 parts would not hold the file),
	// PartConcurrency at once (2). Smaller files go in one streamed PUT.
	PartSize        int
	PartConcurrency int
	// RetryInitial and RetryMax bound the backoff between attempts at one
	// file (1 s … 1 h, doubling, with equal jitter: internal/backoff).
	RetryInitial, RetryMax time.Duration
	// MaxAttempts: after this many failed attempts a file is no longer
	// reloaded from the index; re-discovery (the response read again) still
	// retries it (20).
	MaxAttempts int
	// IndexInterval is how often files the index lists as not stored are
	// reloaded into the queue (1 min; at start too).
	IndexInterval time.Duration
	// DiscoverInterval is how often an index that is a files.Discoverer
	// (ClickHouse) is asked for files named in stored answers but never
	// queued — what a crash can lose (1 h; at start too). It scans
	// answers_current, so keep it long on big warehouses.
	DiscoverInterval time.Duration
	// FlushInterval is the longest an index row waits before it is written
	// (1 s); FlushRows flushes earlier (1000).
	FlushInterval time.Duration
	FlushRows     int
	// DeleteWithResponse removes the objects of a deleted response from the
	// store (files.delete_with_response); otherwise they are only marked.
	DeleteWithResponse bool
	// VerifyExisting makes the skip check ask the API for the file's size
	// (one request, body not read) and rewrite the object when it differs.
	// Off by default: a file id names one immutable upload, and the check
	// would cost one API call per file per re-read.
	VerifyExisting bool
	// TypeMatch is the upload-question rule (files.DefaultTypeMatch).
	TypeMatch []string
	// IsPermanent, when set, classifies further download errors as ones
	// that asking again will not fix, besides those permanent.Is already
	// recognises (the client's, ErrTooLarge) and ErrNotFound. Such files
	// are recorded and retried only by the index reload, with backoff.
	IsPermanent func(error) bool
	Logger      *slog.Logger
	Registerer  prometheus.Registerer
	Now         func() time.Time
}

// Defaults of the options that config also defaults (files.*).
const (
	DefaultMaxConcurrency       = 4
	DefaultMaxSize        int64 = 1 << 30
)

func (o *Options) setDefaults() {
	if o.MaxConcurrency <= 0 {
		o.MaxConcurrency = DefaultMaxConcurrency
	}
	if o.MaxSize == 0 {
		o.MaxSize = DefaultMaxSize
	}
	if o.QueueSize <= 0 {
		o.QueueSize = 10_000
	}
	if o.MemSpool <= 0 {
		o.MemSpool = 1 << 20
	}
	if o.SpoolDir == "" {
		o.SpoolDir = os.TempDir()
	}
	if o.PartSize <= 0 {
		o.PartSize = 5 << 20
	}
	if o.PartConcurrency <= 0 {
		o.PartConcurrency = 2
	}
	if o.RetryInitial <= 0 {
		o.RetryInitial = time.Second
	}
	if o.RetryMax <= 0 {
		o.RetryMax = time.Hour
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 20
	}
	if o.IndexInterval <= 0 {
		o.IndexInterval = time.Minute
	}
	if o.DiscoverInterval <= 0 {
		o.DiscoverInterval = time.Hour
	}
	if o.FlushInterval <= 0 {
		o.FlushInterval = time.Second
	}
	if o.FlushRows <= 0 {
		o.FlushRows = 1000
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Copier copies uploaded files from the API into the object store and
// records each in the index. Build it with NewCopier; Copy works on its own;
// HandleResponse, Enqueue and MarkDeleted feed the background work that Run
// performs.
type Copier struct {
	st  *Store
	dl  Downloader
	idx files.Index
	o   Options
	m   *metrics
	q   *queue

	spoolPool sync.Pool // *bytes.Buffer
	copyPool  sync.Pool // *[]byte

	idxMu  sync.Mutex
	idxBuf []files.Record
	flushC chan struct{}

	recentMu sync.Mutex
	recent   map[string]bool // settled this run: true stored, false failed for good; discovery does not queue either again
	deleted  map[string]bool // responses (key prefix) seen deleted this run

	verMu   sync.Mutex
	lastVer uint64
}

// maxIndexBuffer bounds the index rows kept while the index is unreachable.
const maxIndexBuffer = 200_000

// maxRecent bounds the set of files settled in this run.
const maxRecent = 200_000

// NewCopier returns a copier from dl into st, indexing in idx (nil: no
// index; failed files are then only retried in memory).
func NewCopier(st *Store, dl Downloader, idx files.Index, o Options) *Copier {
	o.setDefaults()
	c := &Copier{st: st, dl: dl, idx: idx, o: o, m: newMetrics(o.Registerer), flushC: make(chan struct{}, 1),
		recent: map[string]bool{}, deleted: map[string]bool{}}
	c.q = newQueue(o.QueueSize, func(n int) { c.m.queueDepth.Set(float64(n)) })
	memSpool := o.MemSpool
	c.spoolPool.New = func() any { return bytes.NewBuffer(make([]byte, 0, min(memSpool, 64<<10))) }
	c.copyPool.New = func() any { b := make([]byte, 128<<10); return &b }
	return c
}
