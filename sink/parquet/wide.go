package parquet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/google/uuid"

	"github.com/surveysync/surveysync/pipeline/flatten"
	"github.com/surveysync/surveysync/wide"
)

// WideOptions choose what ExportWide writes.
type WideOptions struct {
	// Since, when set, keeps the responses whose current version surveysync
	// read at or after it (synced_at).
	Since time.Time
	// ChoiceIDs adds beside each label column (single choice, a matrix row
	// with one answer) a column <name>_id with the chosen option's id.
	ChoiceIDs bool
}

// ExportWide writes survey surveyID's wide rows (one per current response,
// one typed column per question: docs/schema.md, "Wide tables") from the
// Parquet files under dir to the writer open returns for the rows' fields.
// It returns the number of rows.
//
// It streams: a first pass reads the responses files' ids and versions (an
// index of about 40 bytes per response) and the answers files' question
// columns (the column set); a second pass goes through the responses files
// one by one, each with the answers file of the same batch (the sink writes
// a version's answers in the partition and file of its responses row), and
// writes the rows of the current versions found there. Memory holds the
// index and one batch's files, not the survey.
//
// The columns are named as ClickHouse's views name them (package wide),
// in the order the questions first appear (lowest _version), so an export
// of the same files names them the same way every time. Rows come in file
// order (no particular order).
func ExportWide(ctx context.Context, dir string, surveyID int64, o WideOptions,
	open func([]wide.Field) (wide.Writer, error)) (int, error) {
	fail := func(n int, err error) (int, error) {
		return n, fmt.Errorf("parquet export of survey %d under %s: %w", surveyID, dir, err)
	}
	part := fmt.Sprintf("survey_id=%d", surveyID)
	paths, err := filepath.Glob(filepath.Join(dir, flatten.TableResponses, part, "date=*", "*.parquet"))
	if err != nil {
		return fail(0, err)
	}
	sort.Strings(paths)
	mem := memory.NewGoAllocator()
	index, err := currentIndex(ctx, mem, paths)
	if err != nil {
		return fail(0, err)
	}
	cols, err := WideColumns(ctx, dir, surveyID, o.ChoiceIDs)
	if err != nil {
		return fail(0, err)
	}
	ww, err := open(wide.Fields(cols))
	if err != nil {
		return fail(0, err)
	}
	pivot := wide.NewPivot(cols)
	n := 0
	for i, path := range paths {
		if err := ctx.Err(); err != nil {
			ww.Close()
			return fail(n, err)
		}
		rel, err := filepath.Rel(filepath.Join(dir, flatten.TableResponses), path)
		if err != nil {
			ww.Close()
			return fail(n, err)
		}
		k, err := exportFile(ctx, mem, path, filepath.Join(dir, flatten.TableAnswers, rel), int32(i), index, o, pivot, len(cols), ww)
		n += k
		if err != nil {
			ww.Close()
			return fail(n, err)
		}
	}
	if err := ww.Close(); err != nil {
		return fail(n, err)
	}
	return n, nil
}

// current is where a response's current version is: its version, the
// responses file (index into the sorted paths) holding it, and whether it
// is a deletion.
type current struct {
	version uint64
	file    int32
	deleted bool
}

// currentIndex reads the ids and versions of every responses file.
func currentIndex(ctx context.Context, mem memory.Allocator, paths []string) (map[uuid.UUID]current, error) {
	index := map[uuid.UUID]current{}
	for i, path := range paths {
		err := readColumns(ctx, mem, path, []string{"response_id", "_version", "is_deleted"}, func(rec arrow.RecordBatch) error {
			ids, ok1 := rec.Column(0).(*array.String)
			versions, ok2 := rec.Column(1).(*array.Uint64)
			deleted, ok3 := rec.Column(2).(*array.Uint8)
			if !ok1 || !ok2 || !ok3 {
				return errors.New("unexpected column types: not a surveysync responses file")
			}
			for j := 0; j < ids.Len(); j++ {
				id, err := uuid.Parse(ids.Value(j))
				if err != nil {
					return fmt.Errorf("response_id %q: %w", ids.Value(j), err)
				}
				v := versions.Value(j)
				if c, ok := index[id]; ok && c.version >= v {
					continue // the first file with the highest version holds it
				}
				index[id] = current{version: v, file: int32(i), deleted: deleted.Value(j) != 0}
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	return index, nil
}

// wideAnswerColumns are the answers columns WideColumns reads.
var wideAnswerColumns = []string{"question_id", "row_id", "other_id", "question_type", "variable", "question_title",
	"row_label", "page_index", "question_index", "_version"}

// WideColumns reads the answers files of survey surveyID under dir and
// returns the wide columns their questions call for, named as ClickHouse's
// views name them (in the order the questions first appear, by _version;
// kinds from the question's type when first seen; titles and variables as
// last seen), in view order. choiceIDs adds the choice-id columns.
func WideColumns(ctx context.Context, dir string, surveyID int64, choiceIDs bool) ([]wide.Column, error) {
	paths, err := filepath.Glob(filepath.Join(dir, flatten.TableAnswers, fmt.Sprintf("survey_id=%d", surveyID), "date=*", "*.parquet"))
	if err != nil {
		return nil, err
	}
	sort.Strings(paths)
	type seen struct {
		col         wide.Column
		first, last uint64
	}
	cols := map[wide.Key]*seen{}
	note := func(k wide.Key, v uint64, c wide.Column) {
		s := cols[k]
		switch {
		case s == nil:
			c.FirstSeen = time.Unix(0, int64(v)).UTC() // ordering only
			cols[k] = &seen{col: c, first: v, last: v}
		case v < s.first:
			// The kind and position as first seen; the rest as last seen.
			last := s.col
			s.col, s.first = c, v
			s.col.FirstSeen = time.Unix(0, int64(v)).UTC()
			s.col.Variable, s.col.Title, s.col.RowLabel, s.col.QuestionType = last.Variable, last.Title, last.RowLabel, last.QuestionType
		case v > s.last:
			s.col.Variable, s.col.Title, s.col.RowLabel, s.col.QuestionType = c.Variable, c.Title, c.RowLabel, c.QuestionType
			s.last = v
		}
	}
	mem := memory.NewGoAllocator()
	for _, path := range paths {
		err := readColumns(ctx, mem, path, wideAnswerColumns, func(rec arrow.RecordBatch) error {
			q, ok1 := rec.Column(0).(*array.Int64)
			row, ok2 := rec.Column(1).(*array.Int64)
			other, ok3 := rec.Column(2).(*array.Int64)
			qtype, ok4 := rec.Column(3).(*array.String)
			variable, ok5 := rec.Column(4).(*array.String)
			title, ok6 := rec.Column(5).(*array.String)
			rowLabel, ok7 := rec.Column(6).(*array.String)
			page, ok8 := rec.Column(7).(*array.Uint16)
			qidx, ok9 := rec.Column(8).(*array.Uint16)
			ver, ok10 := rec.Column(9).(*array.Uint64)
			if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6 && ok7 && ok8 && ok9 && ok10) {
				return errors.New("unexpected column types: not a surveysync answers file")
			}
			for i := 0; i < q.Len(); i++ {
				k := wide.Key{Survey: surveyID, Question: q.Value(i)}
				if row.IsValid(i) {
					k.Row = row.Value(i)
				}
				v := ver.Value(i)
				ko := wide.Key{Survey: surveyID, Question: k.Question, Part: wide.PartOther}
				if s := cols[k]; s != nil && v >= s.first && v <= s.last {
					if s := cols[ko]; !other.IsValid(i) || (s != nil && v >= s.first && v <= s.last) {
						continue // nothing new: most rows (no string copies)
					}
				}
				c := wide.Column{SurveyID: surveyID, QuestionID: k.Question, RowID: k.Row, QuestionType: strings.Clone(qtype.Value(i)),
					Variable: strings.Clone(variable.Value(i)), Title: strings.Clone(title.Value(i)),
					PageIndex: page.Value(i), QuestionIndex: qidx.Value(i)}
				if k.Row != 0 {
					c.RowLabel = strings.Clone(rowLabel.Value(i))
				}
				c.Kind = wide.QuestionKind(c.QuestionType, c.RowID != 0)
				note(k, v, c)
				if other.IsValid(i) {
					o := c
					o.RowID, o.RowLabel, o.Part, o.Kind = 0, "", wide.PartOther, wide.KindOther
					note(ko, v, o)
				}
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	var fresh []wide.Column
	for _, s := range cols {
		fresh = append(fresh, s.col)
		if choiceIDs && s.col.Kind == wide.KindLabel {
			id := s.col
			id.Part, id.Kind = wide.PartID, wide.KindChoiceID
			fresh = append(fresh, id)
		}
	}
	// Named in the order first seen, as the daemon names them in
	// ClickHouse (within a batch: page, question, part, row).
	sort.Slice(fresh, func(i, j int) bool {
		a, b := fresh[i], fresh[j]
		if !a.FirstSeen.Equal(b.FirstSeen) {
			return a.FirstSeen.Before(b.FirstSeen)
		}
		if a.PageIndex != b.PageIndex {
			return a.PageIndex < b.PageIndex
		}
		if a.QuestionIndex != b.QuestionIndex {
			return a.QuestionIndex < b.QuestionIndex
		}
		if a.QuestionID != b.QuestionID {
			return a.QuestionID < b.QuestionID
		}
		if a.Part != b.Part {
			return a.Part < b.Part
		}
		return a.RowID < b.RowID
	})
	wide.AssignNames(nil, fresh)
	for i := range fresh {
		fresh[i].FirstSeen = time.Time{}
	}
	wide.SortColumns(fresh)
	return fresh, nil
}

// exportFile writes the rows of the current versions held in one responses
// file, with their answers from the batch's answers file.
func exportFile(ctx context.Context, mem memory.Allocator, respPath, ansPath string, fileNo int32,
	index map[uuid.UUID]current, o WideOptions, pivot *wide.Pivot, ncols int, ww wide.Writer) (int, error) {
	// The rows of this file to export, by response id.
	type pick struct {
		row  []any
		vers uint64
	}
	var picks []*pick
	byID := map[string]*pick{}
	since := o.Since.UTC().Truncate(time.Second)
	err := readColumns(ctx, mem, respPath, nil, func(rec arrow.RecordBatch) error {
		col := func(name string) arrow.Array {
			idx := rec.Schema().FieldIndices(name)
			if len(idx) != 1 {
				return nil
			}
			return rec.Column(idx[0])
		}
		ids, ok1 := col("response_id").(*array.String)
		versions, ok2 := col("_version").(*array.Uint64)
		synced, ok3 := col("synced_at").(*array.Timestamp)
		if !ok1 || !ok2 || !ok3 {
			return errors.New("unexpected column types: not a surveysync responses file")
		}
		for i := 0; i < ids.Len(); i++ {
			id, err := uuid.Parse(ids.Value(i))
			if err != nil {
				return fmt.Errorf("response_id %q: %w", ids.Value(i), err)
			}
			c := index[id]
			if c.file != fileNo || c.version != versions.Value(i) || c.deleted {
				continue
			}
			if !o.Since.IsZero() && cellTime(synced, i).Before(since) {
				continue
			}
			row := make([]any, len(wide.ResponseColumns)+ncols)
			for j, name := range wide.ResponseColumns {
				row[j] = cellValue(col(name), i)
			}
			row[0] = id.String()
			p := &pick{row: row, vers: c.version}
			picks = append(picks, p)
			byID[id.String()] = p
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("%s: %w", respPath, err)
	}
	if len(picks) == 0 {
		return 0, nil
	}
	cells := map[*pick][]wide.Cell{}
	if _, err := os.Stat(ansPath); err == nil {
		err := readColumns(ctx, mem, ansPath, wideCellColumns, func(rec arrow.RecordBatch) error {
			ids, ok1 := rec.Column(0).(*array.String)
			ver, ok2 := rec.Column(1).(*array.Uint64)
			q, ok3 := rec.Column(2).(*array.Int64)
			row, ok4 := rec.Column(3).(*array.Int64)
			ai, ok5 := rec.Column(4).(*array.Uint16)
			choiceID, ok6 := rec.Column(5).(*array.Int64)
			choiceLabel, ok7 := rec.Column(6).(*array.String)
			columnID, ok8 := rec.Column(7).(*array.Int64)
			columnLabel, ok9 := rec.Column(8).(*array.String)
			otherID, ok10 := rec.Column(9).(*array.Int64)
			text, ok11 := rec.Column(10).(*array.String)
			value, ok12 := rec.Column(11).(*array.Int64)
			if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6 && ok7 && ok8 && ok9 && ok10 && ok11 && ok12) {
				return errors.New("unexpected column types: not a surveysync answers file")
			}
			for i := 0; i < ids.Len(); i++ {
				p := byID[strings.ToLower(ids.Value(i))]
				if p == nil || p.vers != ver.Value(i) {
					continue
				}
				c := wide.Cell{Question: q.Value(i), AnswerIndex: ai.Value(i), ChoiceID: optInt(choiceID, i),
					ChoiceLabel: strings.Clone(choiceLabel.Value(i)), ColumnID: optInt(columnID, i),
					ColumnLabel: strings.Clone(columnLabel.Value(i)), OtherID: optInt(otherID, i),
					Text: strings.Clone(text.Value(i)), Value: optInt(value, i)}
				if row.IsValid(i) {
					c.Row = row.Value(i)
				}
				cells[p] = append(cells[p], c)
			}
			return nil
		})
		if err != nil {
			return 0, fmt.Errorf("%s: %w", ansPath, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return 0, err
	}
	for i, p := range picks {
		pivot.Values(cells[p], p.row[len(wide.ResponseColumns):])
		if err := ww.Write(p.row); err != nil {
			return i, err
		}
	}
	return len(picks), nil
}

// wideCellColumns are the answers columns a wide row needs.
var wideCellColumns = []string{"response_id", "_version", "question_id", "row_id", "answer_index", "choice_id",
	"choice_label", "column_id", "column_label", "other_id", "text", "value"}

func optInt(a *array.Int64, i int) *int64 {
	if a.IsNull(i) {
		return nil
	}
	v := a.Value(i)
	return &v
}

func cellTime(a *array.Timestamp, i int) time.Time {
	unit := a.DataType().(*arrow.TimestampType).Unit
	return a.Value(i).ToTime(unit).UTC().Truncate(time.Second)
}

// cellValue is row i of a responses column as a wide row's value (nil
// column: a column older files lack, such as contact_id_hash: "").
func cellValue(a arrow.Array, i int) any {
	switch a := a.(type) {
	case nil:
		return ""
	case *array.String:
		return strings.Clone(a.Value(i))
	case *array.Int64: // survey_id, and the nullable ids and total_time
		if a.IsNull(i) {
			return (*int64)(nil)
		}
		v := a.Value(i)
		return &v
	case *array.Uint64:
		return a.Value(i)
	case *array.Timestamp:
		if a.IsNull(i) {
			return (*time.Time)(nil)
		}
		t := cellTime(a, i)
		return &t
	case *array.List:
		vals, ok := a.ListValues().(*array.String)
		if !ok {
			return []string{}
		}
		start, end := a.ValueOffsets(i)
		out := make([]string, 0, end-start)
		for j := start; j < end; j++ {
			out = append(out, strings.Clone(vals.Value(int(j))))
		}
		return out
	}
	return ""
}

// readColumns calls fn with each record of the named columns of a Parquet
// file (every column when names is nil).
func readColumns(ctx context.Context, mem memory.Allocator, path string, names []string, fn func(arrow.RecordBatch) error) error {
	pf, err := file.OpenParquetFile(path, false)
	if err != nil {
		return err
	}
	defer pf.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 4096}, mem)
	if err != nil {
		return err
	}
	var cols []int
	if names != nil {
		schema, err := fr.Schema()
		if err != nil {
			return err
		}
		for _, name := range names {
			idx := schema.FieldIndices(name)
			if len(idx) != 1 {
				return fmt.Errorf("no column %q: not a surveysync file", name)
			}
			cols = append(cols, idx[0])
		}
	}
	rr, err := fr.GetRecordReader(ctx, cols, nil)
	if err != nil {
		return err
	}
	defer rr.Release()
	for rr.Next() {
		if err := fn(rr.RecordBatch()); err != nil {
			return err
		}
	}
	if err := rr.Err(); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}
