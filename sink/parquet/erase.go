package parquet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/surveysync/surveysync/internal/atomicfile"
	"github.com/surveysync/surveysync/internal/kvstore"
	"github.com/surveysync/surveysync/pipeline/files"
	"github.com/surveysync/surveysync/pipeline/flatten"
	"github.com/surveysync/surveysync/record"
	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/survey"
)

// Deletions and erasure in the Parquet warehouse (issue 23,
// docs/privacy.md):
//
//   - Inventory reads a survey's responses files (ReadCurrent), so the
//     poller's reconcile pass finds responses deleted at the source and
//     writes their deletion rows: they leave the *_current queries as in
//     ClickHouse.
//   - Erasure rewrites every responses and answers file holding a row of
//     an erased response without those rows (a new file, so its footer and
//     page statistics are computed afresh from the rows that remain; a file
//     left with no row is removed), and every rejects file naming it. Each
//     file is replaced atomically (temporary file, fsync, rename, fsync
//     folder): a run killed midway leaves every file whole, and the next
//     run finds what is left.
//   - The audit rows and tombstones are _state/erasures.jsonl, one JSON
//     object per line, appended and fsynced; the latest line of a response
//     wins.

// erasuresFile is the audit log's name under _state.
const erasuresFile = "erasures.jsonl"

// Inventory returns w: it reads the responses files.
func (w *dirWarehouse) Inventory() warehouse.Inventory { return w }

// Eraser returns w: it rewrites files.
func (w *dirWarehouse) Eraser() warehouse.Eraser { return w }

// CurrentResponses reads the survey's responses files and returns the
// responses whose latest version is not a deletion, with their status.
func (w *dirWarehouse) CurrentResponses(ctx context.Context, surveyID int64) (map[survey.GUID]string, error) {
	cur, err := ReadCurrent(ctx, w.dir, surveyID)
	if err != nil {
		return nil, fmt.Errorf("parquet sink: read current responses of survey %d: %w", surveyID, err)
	}
	out := make(map[survey.GUID]string, len(cur.Responses))
	for id, r := range cur.Responses {
		if !r.Deleted && r.SurveyID == surveyID {
			out[survey.GUID(id)] = r.Status
		}
	}
	return out, nil
}

// HasResponse reports whether the response is current (written, latest
// version not a deletion), whatever the case of id. It reads the survey's
// responses files.
func (w *dirWarehouse) HasResponse(ctx context.Context, surveyID int64, id survey.GUID) (bool, error) {
	cur, err := w.CurrentResponses(ctx, surveyID)
	if err != nil {
		return false, err
	}
	_, ok := cur[survey.GUID(strings.ToLower(string(id)))]
	return ok, nil
}

type erasureEntry struct {
	SurveyID    int64     `json:"survey_id"`
	ResponseID  string    `json:"response_id"`
	Reason      string    `json:"reason"`
	State       string    `json:"state"`
	RequestedAt time.Time `json:"requested_at"`
	CompletedAt time.Time `json:"completed_at,omitzero"`
	Erased      string    `json:"erased"`
}

// RecordErasures appends audit rows to _state/erasures.jsonl and fsyncs it.
func (w *dirWarehouse) RecordErasures(_ context.Context, es []warehouse.Erasure) error {
	if len(es) == 0 {
		return nil
	}
	var raw []byte
	for _, e := range es {
		line, err := json.Marshal(erasureEntry{SurveyID: e.SurveyID, ResponseID: string(e.ResponseID), Reason: e.Reason, State: e.State,
			RequestedAt: e.RequestedAt.UTC(), CompletedAt: e.CompletedAt.UTC(), Erased: e.Erased})
		if err != nil {
			return fmt.Errorf("parquet sink: encode an erasure of survey %d: %w", e.SurveyID, err)
		}
		raw = append(append(raw, line...), '\n')
	}
	path := filepath.Join(w.dir, stateDirName, erasuresFile)
	w.eraseMu.Lock()
	defer w.eraseMu.Unlock()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("parquet sink: %w", err)
	}
	// After an append cut short by a crash, the next line starts on a line
	// of its own: the torn one stays unreadable alone (Erasures skips it).
	if fi, err := f.Stat(); err == nil && fi.Size() > 0 {
		last := make([]byte, 1)
		if _, err := f.ReadAt(last, fi.Size()-1); err == nil && last[0] != '\n' {
			raw = append([]byte("\n"), raw...)
		}
	}
	if _, err := f.Write(raw); err != nil {
		_ = f.Close()
		return fmt.Errorf("parquet sink: append to %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return fmt.Errorf("parquet sink: sync %s: %w", path, err)
	}
	fi, err := f.Stat()
	if err := errors.Join(err, f.Close()); err != nil {
		return fmt.Errorf("parquet sink: sync %s: %w", path, err)
	}
	if err := atomicfile.SyncDir(filepath.Dir(path)); err != nil {
		return err
	}
	// The length the log has now, so that a log cut short later (at a
	// line's end, where nothing else shows it) is noticed.
	if err := atomicfile.WriteFile(path+sizeSuffix, []byte(strconv.FormatInt(fi.Size(), 10)+"\n"), 0o600); err != nil {
		return fmt.Errorf("parquet sink: record the length of %s: %w", path, err)
	}
	return nil
}

// sizeSuffix names the file beside the erasures log that holds the length
// it had after the latest append.
const sizeSuffix = ".size"

// Erasures reads _state/erasures.jsonl: the latest row of each response.
// A line cut short by a crash while it was appended (the start of a JSON
// line: that append never returned) is skipped. Any other line that does
// not decode is damage (a disk fault, zeros, a hand edit), and so is a log
// shorter than its recorded length (cut short): an error naming the file,
// the line and the fix, since a tombstone lost there would let an erased
// response be written again.
func (w *dirWarehouse) Erasures(context.Context) ([]warehouse.Erasure, error) {
	path := filepath.Join(w.dir, stateDirName, erasuresFile)
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("parquet sink: %w", err)
	}
	if rec, err := os.ReadFile(path + sizeSuffix); err == nil {
		n, perr := strconv.ParseInt(string(bytes.TrimSpace(rec)), 10, 64)
		switch {
		case perr != nil:
			w.log.Warn("parquet sink: the recorded length of the erasures log cannot be read; the log is read without it", "path", path+sizeSuffix, "err", perr)
		case int64(len(raw)) < n:
			return nil, &ErasuresDamagedError{Path: path, Line: bytes.Count(raw, []byte("\n")) + 1, Offset: len(raw),
				Err: fmt.Errorf("cut short: %d bytes, %d were written", len(raw), n)}
		}
	}
	latest := map[warehouse.ResponseKey]warehouse.Erasure{}
	var order []warehouse.ResponseKey
	offset := 0
	for n := 1; offset < len(raw); n++ {
		line, rest, _ := bytes.Cut(raw[offset:], []byte("\n"))
		at := offset
		offset = len(raw) - len(rest)
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var e erasureEntry
		if err := json.Unmarshal(line, &e); err != nil {
			if tornJSON(line) {
				w.log.Warn("parquet sink: skipped a line of the erasures log cut short by a crash while it was appended (that erasure had not returned)", "path", path, "line", n)
				continue
			}
			return nil, &ErasuresDamagedError{Path: path, Line: n, Offset: at, Err: err}
		}
		k := warehouse.ResponseKey{SurveyID: e.SurveyID, ResponseID: survey.GUID(e.ResponseID)}
		if _, ok := latest[k]; !ok {
			order = append(order, k)
		}
		latest[k] = warehouse.Erasure{ResponseKey: k, Reason: e.Reason, State: e.State, RequestedAt: e.RequestedAt, CompletedAt: e.CompletedAt, Erased: e.Erased}
	}
	out := make([]warehouse.Erasure, 0, len(order))
	for _, k := range order {
		out = append(out, latest[k])
	}
	return out, nil
}

// tornJSON reports whether line looks like the start of a line
// RecordErasures wrote: an object, printable UTF-8 without a NUL (zeros and
// noise are damage, not an append cut short).
func tornJSON(line []byte) bool {
	return bytes.HasPrefix(line, []byte("{")) && utf8.Valid(line) && !bytes.ContainsRune(line, 0)
}

// ErasuresDamagedError is Erasures' error for a damaged log.
type ErasuresDamagedError struct {
	Path   string
	Line   int
	Offset int // the damaged line's first byte
	Err    error
}

func (e *ErasuresDamagedError) Error() string {
	return fmt.Sprintf("parquet sink: the erasures log %s is damaged at line %d (byte %d: %v). Its lines are the tombstones that keep "+
		"erased responses out, and one lost there would let an erased response be written again, so nothing is synced until it is fixed. "+
		"Restore the file from a backup; or keep the lines before the damage (truncate -s %d %s && rm -f %s%s) and run surveysync erase again "+
		"for every response erased since (docs/operations.md, \"Damaged local state\")", e.Path, e.Line, e.Offset, e.Err, e.Offset, e.Path, e.Path, sizeSuffix)
}

func (e *ErasuresDamagedError) Unwrap() error { return e.Err }

// EraseRows rewrites the responses and answers files and the rejects
// files that hold rows of keys without them, removes their rows from the
// uploaded-files index, and returns the rows removed per table.
func (w *dirWarehouse) EraseRows(ctx context.Context, keys []warehouse.ResponseKey) (map[string]int64, error) {
	ids := map[string]bool{}
	surveys := map[int64]bool{}
	for _, k := range keys {
		ids[strings.ToLower(string(k.ResponseID))] = true
		surveys[k.SurveyID] = true
	}
	found := map[string]int64{}
	// Answers first, as Write: a visible responses row keeps its answers.
	for _, table := range []string{flatten.TableAnswers, flatten.TableResponses} {
		var paths []string
		for sid := range surveys {
			ps, err := filepath.Glob(filepath.Join(w.dir, table, fmt.Sprintf("survey_id=%d", sid), "date=*", "*.parquet"))
			if err != nil {
				return found, err
			}
			paths = append(paths, ps...)
		}
		sort.Strings(paths)
		found[table] = 0
		for _, p := range paths {
			if err := ctx.Err(); err != nil {
				return found, err
			}
			n, err := w.rewrite(ctx, p, []string{"response_id"}, eraseEdit(ids))
			if err != nil {
				return found, fmt.Errorf("parquet sink: erase from %s: %w", p, err)
			}
			found[table] += n
		}
	}
	n, err := w.eraseRejects(ids)
	found["rejects"] = n
	if err != nil {
		return found, err
	}
	nf, err := w.eraseFileIndex(keys)
	if nf > 0 {
		found["uploaded_files"] = nf
	}
	return found, err
}

// eraseFileIndex removes the responses' rows from the uploaded-files
// index (uploaded_files.db), compacted so that no free page keeps their
// file ids. While a daemon holds the index (an erase command beside it),
// it is left to the daemon: its eraser erases again, at its next refresh,
// every erasure completed in the last two minutes.
func (w *dirWarehouse) eraseFileIndex(keys []warehouse.ResponseKey) (int64, error) {
	idx, err := w.existingFileIndex()
	if errors.Is(err, kvstore.ErrInUse) {
		w.log.Info("parquet sink: the uploaded-files index is held by the running daemon, which erases the rows of these responses at its next refresh", "responses", len(keys))
		return 0, nil
	}
	if err != nil || idx == nil {
		return 0, err
	}
	erased := map[warehouse.ResponseKey]bool{}
	for _, k := range keys {
		erased[warehouse.ResponseKey{SurveyID: k.SurveyID, ResponseID: survey.GUID(strings.ToLower(string(k.ResponseID)))}] = true
	}
	n, err := idx.Remove(func(r files.Record) bool {
		return erased[warehouse.ResponseKey{SurveyID: r.SurveyID, ResponseID: survey.GUID(strings.ToLower(string(r.ResponseID)))}]
	})
	if err != nil {
		return int64(n), fmt.Errorf("parquet sink: erase from the uploaded-files index: %w", err)
	}
	return int64(n), nil
}

// eraseEdit is the rewrite (rewrite.go) that removes the rows whose
// response_id is in ids; it reads only that column to decide.
func eraseEdit(ids map[string]bool) rowEdit {
	return func(rec arrow.RecordBatch) (arrow.RecordBatch, []bool, int64, error) {
		col, ok := colOf(rec, "response_id").(*array.String)
		if !ok {
			return nil, nil, 0, errors.New("response_id is not a string column: not a surveysync file")
		}
		keep := make([]bool, col.Len())
		var drop int64
		for i := range keep {
			keep[i] = !ids[strings.ToLower(col.Value(i))]
			if !keep[i] {
				drop++
			}
		}
		rec.Retain()
		return rec, keep, drop, nil
	}
}

// eraseRejects rewrites the rejects files naming one of ids without those
// lines (removes a file left empty) and returns the lines removed.
func (w *dirWarehouse) eraseRejects(ids map[string]bool) (int64, error) {
	dir := filepath.Join(w.dir, rejectsDirName)
	paths, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil {
		return 0, err
	}
	var removed int64
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			return removed, fmt.Errorf("parquet sink: erase from %s: %w", p, err)
		}
		var kept []byte
		var n int64
		for _, line := range bytes.SplitAfter(raw, []byte("\n")) {
			if len(bytes.TrimSpace(line)) == 0 {
				continue
			}
			var e rejectEntry
			if json.Unmarshal(line, &e) == nil && ids[strings.ToLower(e.ResponseID)] {
				n++
				continue
			}
			kept = append(kept, line...)
		}
		if n == 0 {
			continue
		}
		if len(kept) == 0 {
			err = errors.Join(os.Remove(p), atomicfile.SyncDir(dir))
		} else {
			err = atomicfile.WriteFile(p, kept, 0o600)
		}
		if err != nil {
			return removed, fmt.Errorf("parquet sink: erase from %s: %w", p, err)
		}
		removed += n
	}
	return removed, nil
}

// ResponsesOfContact scans the responses files for the contact.
func (w *dirWarehouse) ResponsesOfContact(ctx context.Context, contactID int64, hash string) ([]warehouse.ResponseKey, error) {
	paths, err := filepath.Glob(filepath.Join(w.dir, flatten.TableResponses, "survey_id=*", "date=*", "*.parquet"))
	if err != nil {
		return nil, err
	}
	seen := map[warehouse.ResponseKey]bool{}
	var out []warehouse.ResponseKey
	for _, p := range paths {
		if err := w.contactRows(ctx, p, contactID, strings.ToLower(hash), func(k warehouse.ResponseKey) {
			if !seen[k] {
				seen[k] = true
				out = append(out, k)
			}
		}); err != nil {
			return nil, fmt.Errorf("parquet sink: find the responses of a contact in %s: %w", p, err)
		}
	}
	return out, nil
}

func (w *dirWarehouse) contactRows(ctx context.Context, path string, contactID int64, hash string, add func(warehouse.ResponseKey)) error {
	pf, err := file.OpenParquetFile(path, false)
	if err != nil {
		return err
	}
	defer pf.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 64 << 10}, w.mem)
	if err != nil {
		return err
	}
	schema, err := fr.Schema()
	if err != nil {
		return err
	}
	var cols []int
	for _, name := range []string{"response_id", "survey_id", "contact_id", "contact_id_hash"} {
		idx := schema.FieldIndices(name)
		if len(idx) != 1 {
			if name == "contact_id_hash" { // files written before issue 23
				continue
			}
			return fmt.Errorf("no column %q: not a surveysync responses file", name)
		}
		cols = append(cols, idx[0])
	}
	rr, err := fr.GetRecordReader(ctx, cols, nil)
	if err != nil {
		return err
	}
	defer rr.Release()
	for rr.Next() {
		rec := rr.RecordBatch()
		ids, ok1 := rec.Column(0).(*array.String)
		surveys, ok2 := rec.Column(1).(*array.Int64)
		contacts, ok3 := rec.Column(2).(*array.Int64)
		if !(ok1 && ok2 && ok3) {
			return errors.New("unexpected column types: not a surveysync responses file")
		}
		var hashes *array.String
		if rec.NumCols() > 3 {
			hashes, _ = rec.Column(3).(*array.String)
		}
		for i := 0; i < int(rec.NumRows()); i++ {
			match := false
			if hash != "" {
				match = hashes != nil && hashes.Value(i) == hash
			} else {
				match = contacts.IsValid(i) && contacts.Value(i) == contactID
			}
			if match {
				add(warehouse.ResponseKey{SurveyID: surveys.Value(i), ResponseID: survey.GUID(ids.Value(i))})
			}
		}
	}
	if err := rr.Err(); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

// EraseContact removes the contact's entries from the feed ledger
// (_feeds/ledger.db): by contact id, and by its hash when hash is not ""
// (privacy.fields.contact_id: hash; entries written before the rule hold
// the id). The ledger is compacted so that no free page keeps them. A
// daemon holding the ledger (running feeds) makes it fail: run the
// command again with the daemon stopped.
func (w *dirWarehouse) EraseContact(ctx context.Context, contactID int64, hash string) (int64, error) {
	l, err := w.existingLedger()
	if errors.Is(err, kvstore.ErrInUse) {
		return 0, fmt.Errorf("parquet sink: the feed ledger is held by the running daemon (its feeds): stop it and run the command again to erase the contact's feed entries: %w", err)
	}
	if err != nil || l == nil {
		return 0, err
	}
	hash = strings.ToLower(hash)
	return l.RewriteContacts(ctx, func(e *record.ContactEntry) (bool, bool) {
		match := (contactID != 0 && e.ContactID == contactID) || (hash != "" && strings.ToLower(e.ContactIDHash) == hash)
		return false, match
	})
}
