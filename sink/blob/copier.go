package blob

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/prometheus/client_golang/prometheus"
	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"
	"golang.org/x/sync/errgroup"

	"github.com/surveysync/surveysync/internal/permanent"
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
	// PartSize and PartConcurrency shape uploads that go through gocloud's
	// writer in parts (S3 files over 5 GiB, other drivers): parts of
	// PartSize bytes (5 MiB, S3's minimum), PartConcurrency at once (2).
	// Spooled files up to 5 GiB go to S3 in one streamed PUT instead.
	PartSize        int
	PartConcurrency int
	// RetryInitial and RetryMax bound the backoff between attempts at one
	// file (1 s … 1 h, doubling, with jitter).
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

	spoolPool sync.Pool  // *bytes.Buffer
	copyPool  sync.Pool  // *[]byte
	s3        *s3.Client // set when the store is S3
	s3Bucket  string

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
	var client *s3.Client
	if st.bucket.As(&client) {
		c.s3, c.s3Bucket = client, st.bucketName()
	}
	memSpool := o.MemSpool
	c.spoolPool.New = func() any { return bytes.NewBuffer(make([]byte, 0, min(memSpool, 64<<10))) }
	c.copyPool.New = func() any { b := make([]byte, 128<<10); return &b }
	return c
}

// Copy copies one file now, unless it is already stored, and returns where
// it is. It does not touch the index or the queue. The object appears under
// its final key only complete: the download is spooled and hashed first,
// then written in one upload that commits on success only.
func (c *Copier) Copy(ctx context.Context, ref files.FileRef) (Stored, error) {
	key := ref.Key()
	st := Stored{FileRef: ref, ObjectURL: c.st.ObjectURL(key)}
	attrs, err := c.st.bucket.Attributes(ctx, key)
	switch {
	case err == nil:
		if prev, ok := storedFrom(attrs); ok {
			prev.FileRef, prev.ObjectURL = ref, st.ObjectURL
			if !c.o.VerifyExisting {
				return prev, nil
			}
			d, err := c.download(ctx, ref)
			if err != nil {
				return st, err
			}
			_ = d.Body.Close()
			if d.Size <= 0 || d.Size == prev.Size {
				return prev, nil
			}
			// The service serves another size: copy again.
		}
	case gcerrors.Code(err) != gcerrors.NotFound:
		return st, &CopyError{ref, ReasonStore, fmt.Errorf("read attributes of %s: %w", st.ObjectURL, err)}
	}

	d, err := c.download(ctx, ref)
	if err != nil {
		return st, err
	}
	defer d.Body.Close()
	if c.o.MaxSize > 0 && d.Size > c.o.MaxSize {
		return st, &CopyError{ref, ReasonTooLarge, permanent.Errorf("too_large", "%w: Content-Length %d > %d bytes", ErrTooLarge, d.Size, c.o.MaxSize)}
	}

	sp := newSpool(c.o.SpoolDir, c.o.MemSpool, &c.spoolPool)
	defer sp.Close()
	h := sha256.New()
	var src io.Reader = d.Body
	if c.o.MaxSize > 0 {
		src = io.LimitReader(d.Body, c.o.MaxSize+1)
	}
	bufp := c.copyPool.Get().(*[]byte)
	sw := &spoolWriter{sp: sp, h: h}
	n, err := io.CopyBuffer(sw, src, *bufp)
	c.copyPool.Put(bufp)
	if err != nil {
		if sw.err != nil {
			return st, &CopyError{ref, ReasonSpool, sw.err}
		}
		if ctx.Err() != nil {
			return st, &CopyError{ref, ReasonDownload, ctx.Err()}
		}
		return st, &CopyError{ref, ReasonDownload, fmt.Errorf("read body after %d bytes: %w", n, err)}
	}
	if c.o.MaxSize > 0 && n > c.o.MaxSize {
		return st, &CopyError{ref, ReasonTooLarge, permanent.Errorf("too_large", "%w: more than %d bytes", ErrTooLarge, c.o.MaxSize)}
	}
	if d.Size > 0 && n != d.Size {
		return st, &CopyError{ref, ReasonTruncated, fmt.Errorf("%w: got %d of %d bytes", ErrTruncated, n, d.Size)}
	}

	st.Size = n
	st.SHA256 = hex.EncodeToString(h.Sum(nil))
	st.FileName = cleanFileName(d.FileName)
	st.ContentType = d.ContentType
	if st.ContentType == "" {
		st.ContentType = "application/octet-stream"
	}
	r, err := sp.Reader()
	if err != nil {
		return st, &CopyError{ref, ReasonSpool, err}
	}
	if rs, ok := r.(io.ReadSeeker); ok && c.s3 != nil && n <= maxSinglePut {
		// To S3 in one PUT from the spool (memory or temporary file): the
		// SDK streams it, so no part buffers are held in memory.
		if err := c.putS3(ctx, key, rs, st); err != nil {
			return st, &CopyError{ref, ReasonStore, fmt.Errorf("write %s: %w", st.ObjectURL, err)}
		}
		return st, nil
	}
	if err := c.put(ctx, key, r, st); err != nil {
		return st, &CopyError{ref, ReasonStore, fmt.Errorf("write %s: %w", st.ObjectURL, err)}
	}
	return st, nil
}

func (c *Copier) download(ctx context.Context, ref files.FileRef) (*Download, error) {
	d, err := c.dl.DownloadFile(ctx, ref.SurveyID, ref.ResponseID, ref.FileID)
	if err != nil {
		reason := ReasonDownload
		if errors.Is(err, survey.ErrNotFound) {
			reason = ReasonNotFound
		}
		return nil, &CopyError{ref, reason, err}
	}
	if d == nil || d.Body == nil {
		return nil, &CopyError{ref, ReasonDownload, errors.New("downloader returned no body")}
	}
	return d, nil
}

// put writes the spooled bytes under key with their metadata. The write
// commits only when it completes: on any error the writer's context is
// cancelled before it is closed, so nothing appears under key.
func (c *Copier) put(ctx context.Context, key string, r io.Reader, st Stored) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	opts := &blob.WriterOptions{
		ContentType:                 st.ContentType,
		ContentDisposition:          contentDisposition(st.FileName),
		Metadata:                    metadata(st),
		BufferSize:                  c.o.PartSize,
		MaxConcurrency:              c.o.PartConcurrency,
		DisableContentTypeDetection: true,
	}
	w, err := c.st.bucket.NewWriter(wctx, key, opts)
	if err != nil {
		return err
	}
	if _, err := io.Copy(w, r); err != nil {
		cancel() // abort: Close must not commit a partial object
		_ = w.Close()
		return err
	}
	return w.Close()
}

// maxSinglePut is S3's limit for one PUT; bigger files go up in parts.
const maxSinglePut = 5 << 30

// metadata is the object metadata of st.
func metadata(st Stored) map[string]string {
	md := map[string]string{
		MetaSHA256:     st.SHA256,
		MetaSize:       strconv.FormatInt(st.Size, 10),
		MetaSurveyID:   strconv.FormatInt(st.SurveyID, 10),
		MetaResponseID: string(st.ResponseID),
		MetaQuestionID: strconv.FormatInt(st.QuestionID, 10),
		MetaFileID:     string(st.FileID),
	}
	if st.FileName != "" {
		md[MetaFileName] = st.FileName
	}
	return md
}

// putS3 uploads the spooled bytes with one PutObject, escaping metadata
// values exactly as gocloud's s3blob does (url.PathEscape), so the object
// reads back through gocloud like any other. S3 creates the object only
// when the PUT completes; a failed or cancelled PUT leaves nothing.
func (c *Copier) putS3(ctx context.Context, key string, body io.ReadSeeker, st Stored) error {
	if _, err := body.Seek(0, io.SeekStart); err != nil {
		return err
	}
	md := metadata(st)
	for k, v := range md {
		md[k] = url.PathEscape(v)
	}
	in := &s3.PutObjectInput{
		Bucket:        aws.String(c.s3Bucket),
		Key:           aws.String(key),
		Body:          body,
		ContentLength: aws.Int64(st.Size),
		ContentType:   aws.String(st.ContentType),
		Metadata:      md,
	}
	if cd := contentDisposition(st.FileName); cd != "" {
		in.ContentDisposition = aws.String(cd)
	}
	// The body's SHA-256 is already known and stored in the metadata, and
	// the SDK adds its own CRC checksum: skip the SigV4 payload hash, one
	// more pass over every byte (UNSIGNED-PAYLOAD, as over HTTPS).
	_, err := c.s3.PutObject(ctx, in, s3.WithAPIOptions(v4.SwapComputePayloadSHA256ForUnsignedPayloadMiddleware))
	return err
}

type spoolWriter struct {
	sp  *spool
	h   io.Writer
	err error
}

func (w *spoolWriter) Write(p []byte) (int, error) {
	w.h.Write(p)
	n, err := w.sp.Write(p)
	if err != nil {
		w.err = err
	}
	return n, err
}

// storedFrom reads what an object's metadata says about it. ok is false
// unless the object carries our SHA-256 and its size matches the metadata:
// only then was it written completely by a copier.
func storedFrom(a *blob.Attributes) (Stored, bool) {
	md := a.Metadata
	sum := md[MetaSHA256]
	size, err := strconv.ParseInt(md[MetaSize], 10, 64)
	if len(sum) != 64 || err != nil || size != a.Size {
		return Stored{}, false
	}
	return Stored{
		FileName:    md[MetaFileName],
		ContentType: a.ContentType,
		Size:        a.Size,
		SHA256:      sum,
		Skipped:     true,
	}, true
}

// Run copies queued files with at most MaxConcurrency copies at once,
// retries failures with backoff, reloads unfinished files from the index
// every IndexInterval and writes index rows, until ctx is done. On the way
// out, files still waiting are recorded in the index as pending so that the
// next run copies them; copies in flight are cancelled (nothing of them
// appears in the store). Run returns nil after a clean stop.
func (c *Copier) Run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	for range c.o.MaxConcurrency {
		g.Go(func() error {
			for {
				t, ok := c.q.pop(gctx)
				if !ok {
					return nil
				}
				c.process(gctx, t)
			}
		})
	}
	g.Go(func() error { c.loop(gctx); return nil })
	_ = g.Wait()

	// Record what is left so the next run finds it in the index.
	now := c.o.Now()
	for _, t := range c.q.drain() {
		if t.del || c.storedThisRun(t.ref) {
			continue // the response will be seen deleted again by reconcile
		}
		c.record(files.Record{FileRef: t.ref, StoredAt: now, Error: "pending: not copied before shutdown", Attempts: t.attempts})
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := c.flush(fctx); err != nil {
		c.o.Logger.Error("file index rows could not be written at shutdown; the files will be found again when their responses are read", "rows", c.bufferedRows(), "err", err)
	}
	return nil
}

func (c *Copier) loop(ctx context.Context) {
	tick := time.NewTicker(min(c.o.RetryInitial/2, c.o.FlushInterval, 500*time.Millisecond))
	defer tick.Stop()
	lastFlush, lastReload, lastDiscover := c.o.Now(), time.Time{}, time.Time{}
	disc, _ := c.idx.(files.Discoverer)
	for {
		now := c.o.Now()
		if disc != nil && now.Sub(lastDiscover) >= c.o.DiscoverInterval {
			lastDiscover = now
			c.discover(ctx, disc)
		}
		if c.idx != nil && now.Sub(lastReload) >= c.o.IndexInterval {
			lastReload = now
			c.reload(ctx)
		}
		c.q.promote(now)
		if now.Sub(lastFlush) >= c.o.FlushInterval || c.bufferedRows() >= c.o.FlushRows {
			lastFlush = now
			if err := c.flush(ctx); err != nil && ctx.Err() == nil {
				c.m.failures.WithLabelValues(ReasonIndex).Inc()
				c.o.Logger.Warn("file index rows not written; kept and retried", "rows", c.bufferedRows(), "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-c.flushC:
		}
	}
}

// discover queues files named in stored answers that the index has never
// seen.
func (c *Copier) discover(ctx context.Context, disc files.Discoverer) {
	refs, err := disc.Undiscovered(ctx, c.o.TypeMatch, c.o.QueueSize)
	if err != nil {
		if ctx.Err() == nil {
			c.m.failures.WithLabelValues(ReasonIndex).Inc()
			c.o.Logger.Warn("cannot look for undiscovered files in the index; will try again", "err", err)
		}
		return
	}
	if len(refs) > 0 {
		c.o.Logger.Info("found files named in stored answers but never copied", "files", len(refs))
		c.Enqueue(refs...)
	}
}

// reload queues the files the index lists as not stored yet whose backoff
// has passed.
func (c *Copier) reload(ctx context.Context) {
	room := c.q.room()
	if room <= 0 {
		return
	}
	recs, err := c.idx.Pending(ctx, room)
	if err != nil {
		if ctx.Err() == nil {
			c.m.failures.WithLabelValues(ReasonIndex).Inc()
			c.o.Logger.Warn("cannot list unfinished files in the index; will try again", "err", err)
		}
		return
	}
	now := c.o.Now()
	for _, r := range recs {
		if r.Attempts >= c.o.MaxAttempts {
			continue
		}
		wait := c.backoff(r.Attempts)
		if strings.HasPrefix(r.Error, permanentPrefix) {
			wait = c.o.RetryMax
		}
		if r.Attempts > 0 && r.StoredAt.Add(wait).After(now) {
			continue
		}
		// A file stored by this run is skipped: the row read may predate it.
		c.q.push(task{ref: r.FileRef, attempts: r.Attempts}, c.skipStored)
	}
}

// process runs t. A task put back for a retry (q.later) stays held; any
// other outcome releases it.
func (c *Copier) process(ctx context.Context, t task) {
	requeued := false
	defer func() {
		if !requeued {
			c.q.done(t)
		}
	}()
	if t.del {
		if err := c.markDeleted(ctx, t.ref.SurveyID, t.ref.ResponseID); err != nil {
			if ctx.Err() != nil {
				return
			}
			c.m.failures.WithLabelValues(ReasonDelete).Inc()
			t.attempts++
			c.o.Logger.Warn("deleted response's files not marked yet; will retry",
				"survey_id", t.ref.SurveyID, "response_id", t.ref.ResponseID, "attempt", t.attempts, "err", err)
			t.due = c.o.Now().Add(c.backoff(t.attempts))
			c.q.later(t)
			requeued = true
		}
		return
	}
	if c.wasDeleted(t.ref) {
		return // its response was deleted after the file was queued
	}
	start := c.o.Now()
	st, err := c.Copy(ctx, t.ref)
	if err != nil {
		if ctx.Err() != nil {
			// Shutting down: Run records the file as pending.
			c.record(files.Record{FileRef: t.ref, StoredAt: c.o.Now(), Error: "pending: copy interrupted by shutdown", Attempts: t.attempts})
			return
		}
		t.attempts++
		reason := ReasonDownload
		var ce *CopyError
		if errors.As(err, &ce) {
			reason = ce.Reason
		}
		c.m.failures.WithLabelValues(reason).Inc()
		now := c.o.Now()
		permanent := c.permanent(err)
		msg := err.Error()
		if permanent {
			msg = permanentPrefix + msg
		}
		c.record(files.Record{FileRef: t.ref, ObjectURL: st.ObjectURL, StoredAt: now, Error: msg, Attempts: t.attempts})
		if permanent || t.attempts >= c.o.MaxAttempts {
			c.settle(t.ref, false)
			c.o.Logger.Error("file not copied; left in the index for a later pass",
				"survey_id", t.ref.SurveyID, "response_id", t.ref.ResponseID, "file_id", t.ref.FileID, "attempts", t.attempts, "reason", reason, "err", err)
			return
		}
		c.o.Logger.Warn("file copy failed; will retry",
			"survey_id", t.ref.SurveyID, "response_id", t.ref.ResponseID, "file_id", t.ref.FileID, "attempt", t.attempts, "reason", reason, "err", err)
		t.due = now.Add(c.backoff(t.attempts))
		c.q.later(t)
		requeued = true
		return
	}
	if st.Skipped {
		c.m.skipped.Inc()
	} else {
		c.m.copied.Inc()
		c.m.bytes.Add(float64(st.Size))
		c.m.duration.Observe(c.o.Now().Sub(start).Seconds())
	}
	c.settle(t.ref, true)
	c.record(files.Record{
		FileRef: t.ref, ObjectURL: st.ObjectURL, FileName: st.FileName, ContentType: st.ContentType,
		Size: st.Size, SHA256: st.SHA256, StoredAt: c.o.Now(), Attempts: t.attempts,
	})
	if c.wasDeleted(t.ref) {
		// The response was deleted while this copy ran: mark (and remove) again.
		c.q.push(task{del: true, ref: files.FileRef{SurveyID: t.ref.SurveyID, ResponseID: t.ref.ResponseID}}, nil)
	}
}

// permanentPrefix starts the recorded error of a failure that asking again
// soon will not fix (404, size cap, …): the index reload waits RetryMax
// before trying such a file again. It is how the index (a table or a JSONL
// file, read back after a restart) keeps the classification.
const permanentPrefix = "permanent: "

func (c *Copier) permanent(err error) bool {
	if errors.Is(err, survey.ErrNotFound) || permanent.Is(err) {
		return true
	}
	return c.o.IsPermanent != nil && c.o.IsPermanent(err)
}

// backoff is the wait after the n-th failed attempt: RetryInitial doubling,
// capped at RetryMax, with ±20 % jitter.
func (c *Copier) backoff(n int) time.Duration {
	d := c.o.RetryInitial
	for i := 1; i < n && d < c.o.RetryMax; i++ {
		d *= 2
	}
	d = min(d, c.o.RetryMax)
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// HandleResponse finds the files of r and queues them; it never blocks
// (pipeline.Options.OnResponse). A deleted response has its files marked
// instead. Files this run already stored are not queued again. When the
// queue is full, the files are written to the index as pending and are
// copied by a later reload.
func (c *Copier) HandleResponse(ctx context.Context, r *survey.Response) {
	if r == nil {
		return
	}
	if r.ResponseStatus == survey.StatusDeleted {
		c.MarkDeleted(r.SurveyID, r.ResponseID)
		return
	}
	c.Enqueue(files.FindFiles(r, c.o.TypeMatch)...)
}

// Enqueue queues files to copy without blocking; see HandleResponse.
func (c *Copier) Enqueue(refs ...files.FileRef) {
	now := c.o.Now()
	for _, ref := range refs {
		if c.q.push(task{ref: ref}, c.skipSettled) {
			continue
		}
		c.m.failures.WithLabelValues(ReasonQueueFull).Inc()
		c.record(files.Record{FileRef: ref, StoredAt: now, Error: "pending: copy queue full"})
	}
}

// MarkDeleted queues the marking of a deleted response's files (and their
// removal from the store when DeleteWithResponse is on); it never blocks.
// Run does the work and retries it until it succeeds.
func (c *Copier) MarkDeleted(surveyID int64, responseID survey.GUID) {
	c.recentMu.Lock()
	if len(c.deleted) >= maxRecent {
		clear(c.deleted)
	}
	c.deleted[files.FileRef{SurveyID: surveyID, ResponseID: responseID}.Key()] = true
	c.recentMu.Unlock()
	c.q.dropResponse(surveyID, responseID)
	c.q.push(task{del: true, ref: files.FileRef{SurveyID: surveyID, ResponseID: responseID}}, nil)
}

// markDeleted records every file of the response as deleted: the files in
// the index and the objects under its prefix; it removes the objects when
// DeleteWithResponse is on.
func (c *Copier) markDeleted(ctx context.Context, surveyID int64, responseID survey.GUID) error {
	byID := map[survey.GUID]files.Record{}
	if c.idx != nil {
		recs, err := c.idx.FilesOf(ctx, surveyID, responseID)
		if err != nil {
			return fmt.Errorf("list files of response %s in the index: %w", responseID, err)
		}
		for _, r := range recs {
			byID[r.FileID] = r
		}
	}
	prefix := files.FileRef{SurveyID: surveyID, ResponseID: responseID}.Key() // ends in "/"
	it := c.st.bucket.List(&blob.ListOptions{Prefix: prefix})
	var keys []string
	for {
		obj, err := it.Next(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("list %s: %w", c.st.ObjectURL(prefix), err)
		}
		keys = append(keys, obj.Key)
		id, perr := survey.ParseGUID(obj.Key[len(prefix):])
		if perr != nil {
			continue // not ours
		}
		if _, ok := byID[id]; !ok {
			byID[id] = files.Record{
				FileRef:   files.FileRef{SurveyID: surveyID, ResponseID: responseID, FileID: id},
				ObjectURL: c.st.ObjectURL(obj.Key), Size: obj.Size,
			}
		}
	}
	if c.o.DeleteWithResponse {
		for _, k := range keys {
			if err := c.st.bucket.Delete(ctx, k); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
				return fmt.Errorf("delete %s: %w", c.st.ObjectURL(k), err)
			}
		}
	}
	now := c.o.Now()
	for _, r := range byID {
		if r.Deleted {
			continue
		}
		r.Deleted, r.StoredAt, r.Version = true, now, 0
		c.m.deleted.Inc()
		c.record(r)
	}
	return nil
}

// settle remembers that this run is done with ref: stored, or failed for
// good (then only the index reload retries it, with backoff).
func (c *Copier) settle(ref files.FileRef, stored bool) {
	c.recentMu.Lock()
	defer c.recentMu.Unlock()
	if len(c.recent) >= maxRecent {
		clear(c.recent)
	}
	c.recent[ref.Key()] = stored
}

func (c *Copier) skipSettled(t task) bool {
	c.recentMu.Lock()
	defer c.recentMu.Unlock()
	_, ok := c.recent[t.ref.Key()]
	return ok
}

func (c *Copier) skipStored(t task) bool { return c.storedThisRun(t.ref) }

// wasDeleted reports whether this run saw ref's response deleted.
func (c *Copier) wasDeleted(ref files.FileRef) bool {
	c.recentMu.Lock()
	defer c.recentMu.Unlock()
	return c.deleted[files.FileRef{SurveyID: ref.SurveyID, ResponseID: ref.ResponseID}.Key()]
}

func (c *Copier) storedThisRun(ref files.FileRef) bool {
	c.recentMu.Lock()
	defer c.recentMu.Unlock()
	return c.recent[ref.Key()]
}

// record buffers an index row; Run writes the buffer.
func (c *Copier) record(r files.Record) {
	if c.idx == nil {
		return
	}
	if r.Version == 0 {
		r.Version = c.version(r.StoredAt)
	}
	c.idxMu.Lock()
	if len(c.idxBuf) >= maxIndexBuffer {
		c.idxBuf[0] = files.Record{}
		c.idxBuf = c.idxBuf[1:]
		c.m.failures.WithLabelValues(ReasonIndex).Inc()
	}
	c.idxBuf = append(c.idxBuf, r)
	full := len(c.idxBuf) >= c.o.FlushRows
	c.idxMu.Unlock()
	if full {
		select {
		case c.flushC <- struct{}{}:
		default:
		}
	}
}

// version returns a strictly increasing _version based on t.
func (c *Copier) version(t time.Time) uint64 {
	c.verMu.Lock()
	defer c.verMu.Unlock()
	v := uint64(t.UnixNano())
	if v <= c.lastVer {
		v = c.lastVer + 1
	}
	c.lastVer = v
	return v
}

func (c *Copier) bufferedRows() int {
	c.idxMu.Lock()
	defer c.idxMu.Unlock()
	return len(c.idxBuf)
}

// flush writes the buffered index rows; on failure they stay buffered.
func (c *Copier) flush(ctx context.Context) error {
	if c.idx == nil {
		return nil
	}
	c.idxMu.Lock()
	rows := c.idxBuf
	c.idxBuf = nil
	c.idxMu.Unlock()
	if len(rows) == 0 {
		return nil
	}
	if err := c.idx.Record(ctx, rows); err != nil {
		c.idxMu.Lock()
		c.idxBuf = append(rows, c.idxBuf...)
		c.idxMu.Unlock()
		return err
	}
	return nil
}

// Flush writes the buffered index rows now (tests, shutdown hooks).
func (c *Copier) Flush(ctx context.Context) error { return c.flush(ctx) }

// QueueDepth is the number of files waiting (queued or waiting to retry).
func (c *Copier) QueueDepth() int {
	c.q.mu.Lock()
	defer c.q.mu.Unlock()
	return len(c.q.ready) + len(c.q.delayed)
}

// Idle reports whether nothing is queued, waiting, in flight or unwritten
// to the index.
func (c *Copier) Idle() bool {
	c.q.mu.Lock()
	held := len(c.q.held)
	c.q.mu.Unlock()
	return held == 0 && c.bufferedRows() == 0
}

// Drained reports whether nothing is queued or in flight and every index
// row is written; files waiting for a retry do not count (their failure is
// already in the index, and a later pass or run retries them). Use it to
// decide that a one-shot sync is done; Idle waits for the retries too.
func (c *Copier) Drained() bool {
	c.q.mu.Lock()
	busy := len(c.q.held) - len(c.q.delayed)
	c.q.mu.Unlock()
	return busy == 0 && c.bufferedRows() == 0
}
