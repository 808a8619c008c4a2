package parquet

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/surveysync/surveysync/internal/atomicfile"
)

// The one Parquet file rewrite, shared by erasure (EraseRows: rows of
// erased responses removed) and privacy apply (ApplyPrivacy: values
// hashed or cleared, rows of dropped questions removed).
//
// A rewrite reads the file twice. The first pass (on the columns the edit
// needs to decide, or all of them) counts the rows the edit changes and
// those it keeps, so a file needing no change is only read, never written.
// The second streams the edited batches into a new file that replaces the
// old one atomically (temporary file, fsync, rename, fsync folder: a run
// killed midway leaves every file whole, old or new, and the next run
// finds what is left). The new file's footer and page statistics are
// computed afresh from the rows written; a file left with no row is
// removed. Neither pass holds more than a batch in memory.

// rowEdit edits one batch of a file's rows: it returns the batch to write
// (rec itself, retained, when it changes no value; released by the
// caller), which of its rows to keep (nil: all) and how many rows it
// changed or removed. It must find its columns by name: the first pass
// may pass it only the columns it asked for.
type rowEdit func(rec arrow.RecordBatch) (out arrow.RecordBatch, keep []bool, changed int64, err error)

// rewrite applies edit to the Parquet file at path (see above) and
// returns the rows it changed or removed; 0 leaves the file alone. probe
// names the columns the first pass reads (nil: all).
func (w *dirWarehouse) rewrite(ctx context.Context, path string, probe []string, edit rowEdit) (int64, error) {
	changed, kept, err := w.countEdit(ctx, path, probe, edit)
	if err != nil || changed == 0 {
		return 0, err
	}
	if kept == 0 {
		if err := os.Remove(path); err != nil {
			return 0, err
		}
		return changed, atomicfile.SyncDir(filepath.Dir(path))
	}
	err = atomicfile.Write(path, 0o600, func(f *os.File) error {
		bw := bufio.NewWriterSize(f, 256<<10) // not an io.Closer: the Parquet writer must not close f
		var pw *pqarrow.FileWriter
		err := readColumns(ctx, w.mem, path, nil, func(rec arrow.RecordBatch) error {
			out, keep, _, err := edit(rec)
			if err != nil {
				return err
			}
			defer out.Release()
			if pw == nil {
				// The edit may add columns (contact_id_hash to a file
				// written before it existed): the new file has its schema.
				if pw, err = newFileWriter(out.Schema(), bw, w.codec, w.mem); err != nil {
					return err
				}
			}
			return writeKept(pw, out, keep)
		})
		if pw != nil {
			err = errors.Join(err, pw.Close())
		}
		if err != nil {
			return err
		}
		return bw.Flush()
	})
	if err != nil {
		return 0, err
	}
	return changed, nil
}

// countEdit runs edit over the file at path (the columns probe names, or
// all) and counts the rows it changes and those it keeps.
func (w *dirWarehouse) countEdit(ctx context.Context, path string, probe []string, edit rowEdit) (changed, kept int64, err error) {
	err = readColumns(ctx, w.mem, path, probe, func(rec arrow.RecordBatch) error {
		out, keep, n, err := edit(rec)
		if err != nil {
			return err
		}
		defer out.Release()
		changed += n
		for i := 0; i < int(out.NumRows()); i++ {
			if keep == nil || keep[i] {
				kept++
			}
		}
		return nil
	})
	return changed, kept, err
}

// newFileWriter is the writer of every Parquet file the sink writes: its
// codec, the Arrow schema stored in the footer, created by "surveysync".
func newFileWriter(schema *arrow.Schema, w io.Writer, codec compress.Compression, mem memory.Allocator) (*pqarrow.FileWriter, error) {
	props := parquet.NewWriterProperties(parquet.WithCompression(codec), parquet.WithAllocator(mem), parquet.WithCreatedBy("surveysync"))
	return pqarrow.NewFileWriter(schema, w, props, pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema(), pqarrow.WithAllocator(mem)))
}

// writeKept writes the runs of rec's rows that keep marks (all when nil).
func writeKept(pw *pqarrow.FileWriter, rec arrow.RecordBatch, keep []bool) error {
	if keep == nil {
		return pw.WriteBuffered(rec)
	}
	start := -1
	flush := func(end int) error {
		if start < 0 {
			return nil
		}
		s := rec.NewSlice(int64(start), int64(end))
		defer s.Release()
		start = -1
		return pw.WriteBuffered(s)
	}
	for i := range keep {
		if !keep[i] {
			if err := flush(i); err != nil {
				return err
			}
			continue
		}
		if start < 0 {
			start = i
		}
	}
	return flush(len(keep))
}
