package parquet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/surveysync/surveysync/internal/atomicfile"
	"github.com/surveysync/surveysync/pipeline/files"
	"github.com/surveysync/surveysync/pipeline/flatten"
	"github.com/surveysync/surveysync/record"
	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/wide"
)

// dirWarehouse is the Parquet sink with its other parts in files beside the
// data: the uploaded-files index in <dir>/uploaded_files.db and the feed
// ledger in <dir>/_feeds/ledger.db (bbolt databases; the former JSONL files
// are imported), each opened on first use; its inventory and erasure are in
// erase.go. It has no webhook log and no query connection.
type dirWarehouse struct {
	*Sink

	mu     sync.Mutex // guards the parts
	index  *FileIndex
	ledger *FileLedger

	eraseMu  sync.Mutex // serialises appends to the erasures log
	verifyMu sync.Mutex // serialises appends to the verification history

	choiceIDs bool // Options.WideChoiceIDs
}

// OpenWarehouse opens the Parquet warehouse in o.Dir.
func OpenWarehouse(o Options) (warehouse.Warehouse, error) {
	s, err := Open(o)
	if err != nil {
		return nil, err
	}
	return &dirWarehouse{Sink: s, choiceIDs: o.WideChoiceIDs}, nil
}

// FileIndex opens <dir>/uploaded_files.db (importing a former
// <dir>/uploaded_files.jsonl).
func (w *dirWarehouse) FileIndex() (files.Index, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.index == nil {
		ix, err := OpenFileIndex(filepath.Join(w.dir, "uploaded_files.db"))
		if err != nil {
			return nil, err
		}
		w.index = ix
	}
	return w.index, nil
}

// FeedLedger opens the ledger in <dir>/_feeds (importing the former
// <dir>/_feeds/*.jsonl).
func (w *dirWarehouse) FeedLedger() (record.FeedLedger, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ledger == nil {
		l, err := NewFileLedger(filepath.Join(w.dir, "_feeds"))
		if err != nil {
			return nil, err
		}
		w.ledger = l
	}
	return w.ledger, nil
}

// existingFileIndex opens the uploaded-files index for erasure and privacy
// apply; nil when there is none (no file was ever uploaded).
func (w *dirWarehouse) existingFileIndex() (*FileIndex, error) {
	if _, err := os.Stat(filepath.Join(w.dir, "uploaded_files.db")); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	idx, err := w.FileIndex()
	if err != nil {
		return nil, err
	}
	return idx.(*FileIndex), nil
}

// existingLedger opens the feed ledger for erasure and privacy apply; nil
// when there is none (no feed ever ran).
func (w *dirWarehouse) existingLedger() (*FileLedger, error) {
	if _, err := os.Stat(filepath.Join(w.dir, "_feeds", ledgerDBName)); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	l, err := w.FeedLedger()
	if err != nil {
		return nil, err
	}
	return l.(*FileLedger), nil
}

func (w *dirWarehouse) WebhookLog() record.WebhookLog { return nil }
func (w *dirWarehouse) QueryConn() record.QueryConn   { return nil }

// Leases is nil: the daemon locks the folder instead (internal/dirlock).
func (w *dirWarehouse) Leases() warehouse.Leases { return nil }

// CheckWrites creates and removes a file in the folder.
func (w *dirWarehouse) CheckWrites(context.Context) []warehouse.WriteCheck {
	c := warehouse.WriteCheck{Table: w.dir}
	f, err := os.CreateTemp(w.dir, ".surveysync-doctor-*")
	if err == nil {
		err = errors.Join(f.Close(), os.Remove(f.Name()))
	}
	if err != nil {
		c.Err, c.Fix = err, "make parquet.dir writable by the user running surveysync"
	}
	return []warehouse.WriteCheck{c}
}

// Ping fails once the warehouse is closed, or when a block cannot be
// written and synced in one of the sink's folders now (a full disk, a
// read-only folder or file system): for /readyz, which must say so while
// every write fails, and turn ready again once the cause is gone.
func (w *dirWarehouse) Ping(context.Context) error {
	if err := w.checkOpen(); err != nil {
		return err
	}
	for _, d := range sinkDirs {
		if err := atomicfile.ProbeWritable(filepath.Join(w.dir, d)); err != nil {
			return fmt.Errorf("parquet sink: %w", err)
		}
	}
	return nil
}

// Exporter returns w: it reads the files (ExportWide, ExportTable).
func (w *dirWarehouse) Exporter() warehouse.Exporter { return w }

// WideColumns names the survey's questions as the wide export does.
func (w *dirWarehouse) WideColumns(ctx context.Context, surveyID int64) ([]wide.Column, error) {
	return WideColumns(ctx, w.dir, surveyID, w.choiceIDs)
}

// Export reads the survey's files: ExportWide (an error for a survey
// never written), or ExportTable.
func (w *dirWarehouse) Export(ctx context.Context, table string, surveyID int64, since time.Time,
	open func([]wide.Field) (wide.Writer, error)) (int, error) {
	o := WideOptions{Since: since, ChoiceIDs: w.choiceIDs}
	if table == warehouse.ExportWide {
		// As ClickHouse's: a survey never written has no wide table.
		part := filepath.Join(w.dir, flatten.TableResponses, fmt.Sprintf("survey_id=%d", surveyID))
		if _, err := os.Stat(part); err != nil {
			return 0, fmt.Errorf("parquet export: no responses of survey %d under %s, so no wide table (run `surveysync run` first, or set --parquet-dir)", surveyID, w.dir)
		}
		return ExportWide(ctx, w.dir, surveyID, o, open)
	}
	return ExportTable(ctx, w.dir, table, surveyID, o, open)
}

func (w *dirWarehouse) String() string { return "Parquet files under " + w.dir }

// Close closes the parts, then the sink.
func (w *dirWarehouse) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	var errs []error
	if w.ledger != nil {
		errs = append(errs, w.ledger.Close())
	}
	if w.index != nil {
		errs = append(errs, w.index.Close())
	}
	return errors.Join(append(errs, w.Sink.Close())...)
}
