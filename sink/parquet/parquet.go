// Package parquet is surveysync's embedded default warehouse: it writes the
// responses and answers tables as Parquet files in a local directory, and
// keeps the stream checkpoints and survey list in small JSON files beside
// them, the uploaded-files index and the feed ledger in bbolt files
// (OpenWarehouse). It is what runs when no ClickHouse is configured, and a way to feed
// a data lake.
//
// # Layout
//
//	<dir>/responses/survey_id=<id>/date=<YYYY-MM-DD>/part-<token>.parquet
//	<dir>/answers/survey_id=<id>/date=<YYYY-MM-DD>/part-<token>.parquet
//	<dir>/_state/sync_state.json, <dir>/_state/surveys.json
//	<dir>/rejects/rejects-<time>-<hash>.jsonl (responses given up on, see WriteRejects)
//	<dir>/uploaded_files.db, <dir>/_feeds/ledger.db (bbolt; FileIndex, FileLedger)
//
// One folder per table, partitioned by survey and by day (UTC): the day of
// date_completed, else of date_created (partial responses); a deleted
// response's row goes under the day it was synced (synced_at). An answers row
// goes to the partition of its response's row in the same batch. <token> is
// the batch token (flatten.Batch.Token, a hash of the batch's response ids
// and versions), so writing the same batch again replaces its files instead
// of duplicating them. The columns are flatten.ResponsesSchema and
// flatten.AnswersSchema (the Arrow schema is stored in the files);
// timestamps are TIMESTAMP(MILLIS, UTC). Files are zstd-compressed by
// default.
//
// # Durability
//
// Each file is written to a temporary name starting with "." and ending in
// ".tmp" in its partition folder, fsynced, renamed to its final name, and the
// folder fsynced: a reader never sees a partial file, and no reader glob
// ending in ".parquet" matches a temporary one. Open removes temporary files
// left by a crash in its own folders (responses, answers, _state; not, say,
// a files store under the same dir). Write writes a batch's answers files
// before its responses files and returns only once all are durable, so a
// response row that is visible always has its answers rows of that version
// visible too. The state files are replaced the same way (temp, fsync,
// rename, fsync folder).
//
// # Querying
//
// Rows are append-only versions, as in ClickHouse: a response re-read three
// times has three rows, and a deleted response gets a last row with
// is_deleted = 1. Readers must therefore keep, per response_id, the row with
// the highest _version (argMax), drop it if it is deleted, and keep only the
// answers rows of that version — exactly what the *_current views do in
// ClickHouse. The survey_id and date folder names are Hive-style partitions
// and can prune a glob; the files carry survey_id themselves, so read them
// with Hive partitioning off.
//
// DuckDB:
//
//	CREATE VIEW responses_current AS
//	SELECT * FROM read_parquet('data/responses/**/*.parquet', hive_partitioning = false)
//	QUALIFY row_number() OVER (PARTITION BY response_id ORDER BY _version DESC) = 1
//	    AND is_deleted = 0;
//	CREATE VIEW answers_current AS
//	SELECT a.* FROM read_parquet('data/answers/**/*.parquet', hive_partitioning = false) a
//	JOIN responses_current r ON a.response_id = r.response_id AND a._version = r._version;
//
// ClickHouse (clickhouse local, or a server with access to the files; recent
// releases add the date folder as a column unless use_hive_partitioning = 0):
//
//	SELECT response_id, argMax(response_status, _version) AS status
//	FROM file('data/responses/**/*.parquet', Parquet)
//	GROUP BY response_id
//	HAVING argMax(is_deleted, _version) = 0;
//
//	SELECT a.* FROM file('data/answers/**/*.parquet', Parquet) AS a
//	INNER JOIN (
//	    SELECT response_id, max(_version) AS v FROM file('data/responses/**/*.parquet', Parquet)
//	    GROUP BY response_id HAVING argMax(is_deleted, _version) = 0
//	) AS r ON a.response_id = r.response_id AND a._version = r.v;
//
// The url_parameters columns are named "url_parameters.name" and
// "url_parameters.value" (lists of strings): quote them ("…" in DuckDB,
// `…` in ClickHouse).
//
// The sink never compacts: each batch adds one file per table and partition.
// Large batches (the pipeline's max_rows/max_bytes) keep the count low.
// docs/parquet.md says the same for users.
package parquet

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/compress"

	"github.com/surveysync/surveysync/internal/atomicfile"
	"github.com/surveysync/surveysync/pipeline/flatten"
)

// Options configures the sink.
type Options struct {
	// Dir is the root folder of the tables and state files; created if missing.
	Dir string
	// Compression of the Parquet column chunks: "zstd" (default), "snappy",
	// "gzip" or "none".
	Compression string
	// Logger receives one debug line per file; nil discards.
	Logger *slog.Logger
	// Allocator for the Parquet writer's and the partitioning's buffers;
	// nil means memory.DefaultAllocator.
	Allocator memory.Allocator
	// KeepTempFiles leaves the temporary files of interrupted writes in
	// place: the folder may be a running daemon's, whose writes in flight
	// they are (surveysync status, query, …). Only the process holding the
	// folder's lock (the daemon, internal/dirlock) removes them at Open.
	KeepTempFiles bool
	// WideChoiceIDs adds a choice-id column beside each choice question's
	// in the wide export (wide.choice_ids), as ClickHouse's views do.
	WideChoiceIDs bool
}

// Sink writes batches as Parquet files and keeps state in JSON files. It
// implements pipeline.Sink, pipeline.StateStore, pipeline.SurveyStore and
// pipeline.RejectStore.
// Its methods are safe for concurrent use.
type Sink struct {
	dir   string
	codec compress.Compression
	log   *slog.Logger
	mem   memory.Allocator

	mu     sync.Mutex // guards closed and the state files
	closed bool

	// testHookBeforeRename, when set, is called with a file's temporary
	// path before it is renamed into place; an error aborts the write.
	testHookBeforeRename func(tmp string) error
}

const stateDirName = "_state"

// sinkDirs are the sink's own folders under Dir.
var sinkDirs = []string{flatten.TableResponses, flatten.TableAnswers, stateDirName, rejectsDirName}

var codecs = map[string]compress.Compression{
	"zstd":         compress.Codecs.Zstd,
	"snappy":       compress.Codecs.Snappy,
	"gzip":         compress.Codecs.Gzip,
	"none":         compress.Codecs.Uncompressed,
	"uncompressed": compress.Codecs.Uncompressed,
}

// DefaultCompression is Options.Compression's default.
const DefaultCompression = "zstd"

func (o *Options) setDefaults() {
	if o.Compression == "" {
		o.Compression = DefaultCompression
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Allocator == nil {
		o.Allocator = memory.DefaultAllocator
	}
}

// Open creates the folders if needed, removes temporary files a crashed
// write left behind, and returns the sink.
func Open(o Options) (*Sink, error) {
	o.setDefaults()
	if o.Dir == "" {
		return nil, errors.New("parquet sink: dir is required")
	}
	codec, ok := codecs[strings.ToLower(o.Compression)]
	if !ok {
		return nil, fmt.Errorf("parquet sink: compression %q: want zstd, snappy, gzip or none", o.Compression)
	}
	s := &Sink{dir: o.Dir, codec: codec, log: o.Logger, mem: o.Allocator}
	for _, d := range sinkDirs {
		if err := atomicfile.MkdirAll(filepath.Join(o.Dir, d)); err != nil {
			return nil, fmt.Errorf("parquet sink: %w", err)
		}
	}
	// Only the sink's own folders: others (the default files store) may
	// live under Dir too.
	removed := 0
	for _, d := range sinkDirs {
		if o.KeepTempFiles {
			break
		}
		n, err := removeTempFiles(filepath.Join(o.Dir, d))
		if err != nil {
			return nil, fmt.Errorf("parquet sink: clean up temporary files in %s: %w", filepath.Join(o.Dir, d), err)
		}
		removed += n
	}
	if removed > 0 {
		s.log.Info("parquet sink removed temporary files of interrupted writes", "dir", o.Dir, "files", removed)
	}
	return s, nil
}

// removeTempFiles deletes the leftovers of interrupted writes under dir.
func removeTempFiles(dir string) (int, error) {
	n := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() && atomicfile.IsTemp(d.Name()) {
			if err := os.Remove(path); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	return n, err
}

// Close marks the sink closed; later calls fail. Every Write that returned
// nil is already durable, so Close has nothing to flush.
func (s *Sink) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

func (s *Sink) checkOpen() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("parquet sink: closed")
	}
	return nil
}

// Write writes the batch's rows as one file per table and partition, and
// returns nil once they are all durable. Writing the same batch again
// replaces the same files. Write does not release the batch.
func (s *Sink) Write(ctx context.Context, b *flatten.Batch) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	if resp, ans := b.Rows(); resp == 0 && ans == 0 {
		return nil
	}
	if b.Token == "" || strings.ContainsAny(b.Token, `/\.`) {
		return fmt.Errorf("parquet sink: batch token %q cannot name a file", b.Token)
	}
	resp, err := partitionResponses(b.Responses)
	if err != nil {
		return fmt.Errorf("parquet sink: batch %s: %w", b.Token, err)
	}
	ans, err := partitionAnswers(b.Answers, b.Responses, resp)
	if err != nil {
		return fmt.Errorf("parquet sink: batch %s: %w", b.Token, err)
	}
	// Answers first: a visible responses row implies its answers are too.
	if err := s.writeTable(ctx, flatten.TableAnswers, b.Token, b.Answers, ans); err != nil {
		return err
	}
	return s.writeTable(ctx, flatten.TableResponses, b.Token, b.Responses, resp)
}

func (s *Sink) writeTable(ctx context.Context, table, token string, rec arrow.RecordBatch, p partitioning) error {
	if rec == nil || rec.NumRows() == 0 {
		return nil
	}
	for i, key := range p.keys {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("parquet sink: write %s of batch %s: %w", table, token, err)
		}
		part, err := p.record(i, rec, s.mem)
		if err != nil {
			return fmt.Errorf("parquet sink: partition %s of batch %s: %w", table, token, err)
		}
		dir := filepath.Join(s.dir, table, key.path())
		path := filepath.Join(dir, "part-"+token+".parquet")
		err = s.writeFile(dir, path, part)
		part.Release()
		if err != nil {
			return fmt.Errorf("parquet sink: write %s: %w", path, err)
		}
		s.log.Debug("parquet file written", "path", path, "rows", part.NumRows())
	}
	return nil
}

// writeFile writes rec to path durably (atomicfile): a reader never sees
// a partial file, and on error no temporary file is left behind.
func (s *Sink) writeFile(dir, path string, rec arrow.RecordBatch) error {
	if err := atomicfile.MkdirAll(dir); err != nil {
		return err
	}
	return atomicfile.Write(path, 0o600, func(f *os.File) error {
		bw := bufio.NewWriterSize(f, 256<<10) // not an io.Closer: the Parquet writer must not close f
		w, err := newFileWriter(rec.Schema(), bw, s.codec, s.mem)
		if err != nil {
			return err
		}
		if err := w.Write(rec); err != nil {
			return err // Write closed w on error
		}
		if err := w.Close(); err != nil {
			return err
		}
		if err := bw.Flush(); err != nil {
			return err
		}
		return s.beforeRename(f.Name())
	})
}

// beforeRename runs the test hook, if any, on a written temporary file.
func (s *Sink) beforeRename(tmp string) error {
	if s.testHookBeforeRename == nil {
		return nil
	}
	return s.testHookBeforeRename(tmp)
}

// partKey is a partition: a survey and a UTC day.
type partKey struct {
	survey int64
	day    int64 // days since the Unix epoch
}

func (k partKey) path() string {
	d := time.Unix(k.day*86400, 0).UTC().Format(time.DateOnly)
	return fmt.Sprintf("survey_id=%d/date=%s", k.survey, d)
}

func dayOf(ms int64) int64 {
	const msPerDay = 86400 * 1000
	d := ms / msPerDay
	if ms%msPerDay < 0 {
		d--
	}
	return d
}

// partitioning assigns each row of a record to a partition.
type partitioning struct {
	keys []partKey    // partitions in order of first appearance
	rows []int32      // partition index of each row
	runs [][][2]int64 // per partition, its runs of rows [start, end); built by record
}

func (p *partitioning) add(k partKey, index map[partKey]int32) int32 {
	i, ok := index[k]
	if !ok {
		i = int32(len(p.keys))
		index[k] = i
		p.keys = append(p.keys, k)
	}
	p.rows = append(p.rows, i)
	return i
}

func column[T arrow.Array](rec arrow.RecordBatch, name string) (T, error) {
	var zero T
	idx := rec.Schema().FieldIndices(name)
	if len(idx) != 1 {
		return zero, fmt.Errorf("record has no column %s", name)
	}
	c, ok := rec.Column(idx[0]).(T)
	if !ok {
		return zero, fmt.Errorf("column %s has type %s", name, rec.Column(idx[0]).DataType())
	}
	return c, nil
}

// partitionResponses partitions responses rows by survey and by the day of
// date_completed, else date_created; deleted rows by the day of synced_at.
func partitionResponses(rec arrow.RecordBatch) (partitioning, error) {
	var p partitioning
	if rec == nil || rec.NumRows() == 0 {
		return p, nil
	}
	survey, err := column[*array.Int64](rec, "survey_id")
	if err != nil {
		return p, err
	}
	created, err := column[*array.Timestamp](rec, "date_created")
	if err != nil {
		return p, err
	}
	completed, err := column[*array.Timestamp](rec, "date_completed")
	if err != nil {
		return p, err
	}
	synced, err := column[*array.Timestamp](rec, "synced_at")
	if err != nil {
		return p, err
	}
	deleted, err := column[*array.Uint8](rec, "is_deleted")
	if err != nil {
		return p, err
	}
	index := map[partKey]int32{}
	p.rows = make([]int32, 0, rec.NumRows())
	for i := 0; i < int(rec.NumRows()); i++ {
		var ms arrow.Timestamp
		switch {
		case deleted.Value(i) != 0:
			ms = synced.Value(i)
		case completed.IsValid(i):
			ms = completed.Value(i)
		default:
			ms = created.Value(i)
		}
		p.add(partKey{survey: survey.Value(i), day: dayOf(int64(ms))}, index)
	}
	return p, nil
}

// partitionAnswers puts each answers row in the partition of its response's
// row (same response_id and _version) in the batch; a row without one (not
// expected) goes by its own date_completed, else to 1970-01-01.
func partitionAnswers(rec, responses arrow.RecordBatch, rp partitioning) (partitioning, error) {
	var p partitioning
	if rec == nil || rec.NumRows() == 0 {
		return p, nil
	}
	type rowKey struct {
		id      string
		version uint64
	}
	of := make(map[rowKey]partKey, len(rp.rows))
	if len(rp.rows) > 0 {
		ids, err := column[*array.String](responses, "response_id")
		if err != nil {
			return p, err
		}
		versions, err := column[*array.Uint64](responses, "_version")
		if err != nil {
			return p, err
		}
		for i, pi := range rp.rows {
			of[rowKey{ids.Value(i), versions.Value(i)}] = rp.keys[pi]
		}
	}
	ids, err := column[*array.String](rec, "response_id")
	if err != nil {
		return p, err
	}
	versions, err := column[*array.Uint64](rec, "_version")
	if err != nil {
		return p, err
	}
	survey, err := column[*array.Int64](rec, "survey_id")
	if err != nil {
		return p, err
	}
	completed, err := column[*array.Timestamp](rec, "date_completed")
	if err != nil {
		return p, err
	}
	index := map[partKey]int32{}
	p.rows = make([]int32, 0, rec.NumRows())
	for i := 0; i < int(rec.NumRows()); i++ {
		k, ok := of[rowKey{ids.Value(i), versions.Value(i)}]
		if !ok {
			k = partKey{survey: survey.Value(i)}
			if completed.IsValid(i) {
				k.day = dayOf(int64(completed.Value(i)))
			}
		}
		p.add(k, index)
	}
	return p, nil
}

// record returns the rows of partition i of rec, in their order, as a new
// record the caller releases: a zero-copy slice when they are contiguous,
// else the concatenation of their runs.
func (p *partitioning) record(i int, rec arrow.RecordBatch, mem memory.Allocator) (arrow.RecordBatch, error) {
	if p.runs == nil {
		// Runs of consecutive rows of each partition, in one pass.
		p.runs = make([][][2]int64, len(p.keys))
		for r := 0; r < len(p.rows); {
			k, start := p.rows[r], r
			for r < len(p.rows) && p.rows[r] == k {
				r++
			}
			p.runs[k] = append(p.runs[k], [2]int64{int64(start), int64(r)})
		}
	}
	runs := p.runs[i]
	if len(runs) == 1 {
		return rec.NewSlice(runs[0][0], runs[0][1]), nil
	}
	cols := make([]arrow.Array, rec.NumCols())
	defer func() {
		for _, c := range cols {
			if c != nil {
				c.Release()
			}
		}
	}()
	n := int64(0)
	for _, run := range runs {
		n += run[1] - run[0]
	}
	pieces := make([]arrow.Array, len(runs))
	for c := range cols {
		for j, run := range runs {
			pieces[j] = array.NewSlice(rec.Column(c), run[0], run[1])
		}
		col, err := array.Concatenate(pieces, mem)
		for _, piece := range pieces {
			piece.Release()
		}
		if err != nil {
			return nil, fmt.Errorf("column %s: %w", rec.ColumnName(c), err)
		}
		cols[c] = col
	}
	return array.NewRecordBatch(rec.Schema(), cols, n), nil
}
