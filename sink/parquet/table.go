package parquet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/google/uuid"

	"github.com/surveysync/surveysync/pipeline/flatten"
	"github.com/surveysync/surveysync/wide"
)

// tableFields are the columns ExportTable writes, as ClickHouse's
// responses_current and answers_current have them.
var tableFields = map[string][]wide.Field{
	flatten.TableResponses: {
		{Name: "response_id", Type: "UUID"}, {Name: "survey_id", Type: "Int64"}, {Name: "survey_name", Type: "String"},
		{Name: "distribution_id", Type: "Nullable(Int64)"}, {Name: "contact_id", Type: "Nullable(Int64)"},
		{Name: "contact_id_hash", Type: "String"}, {Name: "ip_address", Type: "String"},
		{Name: "date_created", Type: "DateTime('UTC')"}, {Name: "date_completed", Type: "Nullable(DateTime('UTC'))"},
		{Name: "total_time", Type: "Nullable(Int64)"}, {Name: "response_status", Type: "String"},
		{Name: "url_parameters.name", Type: "Array(String)"}, {Name: "url_parameters.value", Type: "Array(String)"},
		{Name: "synced_at", Type: "DateTime('UTC')"}, {Name: "_version", Type: "UInt64"},
	},
	flatten.TableAnswers: {
		{Name: "response_id", Type: "UUID"}, {Name: "survey_id", Type: "Int64"}, {Name: "page_id", Type: "Int64"},
		{Name: "page_index", Type: "UInt16"}, {Name: "question_id", Type: "Int64"}, {Name: "question_index", Type: "UInt16"},
		{Name: "question_type", Type: "String"}, {Name: "question_title", Type: "String"}, {Name: "variable", Type: "String"},
		{Name: "answer_index", Type: "UInt16"}, {Name: "row_id", Type: "Nullable(Int64)"}, {Name: "row_label", Type: "String"},
		{Name: "column_id", Type: "Nullable(Int64)"}, {Name: "column_label", Type: "String"},
		{Name: "choice_id", Type: "Nullable(Int64)"}, {Name: "choice_label", Type: "String"},
		{Name: "other_id", Type: "Nullable(Int64)"}, {Name: "text", Type: "String"}, {Name: "value", Type: "Nullable(Int64)"},
		{Name: "response_status", Type: "String"}, {Name: "date_completed", Type: "Nullable(DateTime('UTC'))"},
		{Name: "_version", Type: "UInt64"},
	},
}

// ExportTable writes survey surveyID's current rows of a long table from
// the Parquet files under dir: "responses" (each response at its latest
// version, deleted ones left out, as ClickHouse's responses_current) or
// "answers" (the answers of those versions, as answers_current), to the
// writer open returns for the table's fields. Since keeps the responses
// read at or after it, and their answers. It streams as ExportWide does
// (an id/version index, then one batch's files at a time) and returns the
// number of rows.
func ExportTable(ctx context.Context, dir, table string, surveyID int64, o WideOptions,
	open func([]wide.Field) (wide.Writer, error)) (int, error) {
	fail := func(n int, err error) (int, error) {
		return n, fmt.Errorf("parquet export of %s of survey %d under %s: %w", table, surveyID, dir, err)
	}
	fields, ok := tableFields[table]
	if !ok {
		return fail(0, errors.New("want responses or answers"))
	}
	paths, err := filepath.Glob(filepath.Join(dir, flatten.TableResponses, fmt.Sprintf("survey_id=%d", surveyID), "date=*", "*.parquet"))
	if err != nil {
		return fail(0, err)
	}
	sort.Strings(paths)
	mem := memory.NewGoAllocator()
	index, err := currentIndex(ctx, mem, paths)
	if err != nil {
		return fail(0, err)
	}
	ww, err := open(fields)
	if err != nil {
		return fail(0, err)
	}
	since := o.Since.UTC().Truncate(1e9)
	n := 0
	for i, path := range paths {
		if err := ctx.Err(); err != nil {
			ww.Close()
			return fail(n, err)
		}
		// The current versions this file holds.
		picks := map[string]uint64{}
		err := readColumns(ctx, mem, path, nil, func(rec arrow.RecordBatch) error {
			ids, ok1 := recColumn(rec, "response_id").(*array.String)
			versions, ok2 := recColumn(rec, "_version").(*array.Uint64)
			synced, ok3 := recColumn(rec, "synced_at").(*array.Timestamp)
			if !ok1 || !ok2 || !ok3 {
				return errors.New("unexpected column types: not a surveysync responses file")
			}
			for j := 0; j < ids.Len(); j++ {
				id, err := uuid.Parse(ids.Value(j))
				if err != nil {
					return fmt.Errorf("response_id %q: %w", ids.Value(j), err)
				}
				c := index[id]
				if c.file != int32(i) || c.version != versions.Value(j) || c.deleted {
					continue
				}
				if !o.Since.IsZero() && cellTime(synced, j).Before(since) {
					continue
				}
				picks[id.String()] = c.version
				if table == flatten.TableResponses {
					if err := ww.Write(tableRow(rec, fields, j, id.String())); err != nil {
						return err
					}
					n++
				}
			}
			return nil
		})
		if err != nil {
			ww.Close()
			return fail(n, fmt.Errorf("%s: %w", path, err))
		}
		if table != flatten.TableAnswers || len(picks) == 0 {
			continue
		}
		rel, err := filepath.Rel(filepath.Join(dir, flatten.TableResponses), path)
		if err != nil {
			ww.Close()
			return fail(n, err)
		}
		ansPath := filepath.Join(dir, flatten.TableAnswers, rel)
		if _, err := os.Stat(ansPath); errors.Is(err, os.ErrNotExist) {
			continue
		}
		err = readColumns(ctx, mem, ansPath, nil, func(rec arrow.RecordBatch) error {
			ids, ok1 := recColumn(rec, "response_id").(*array.String)
			versions, ok2 := recColumn(rec, "_version").(*array.Uint64)
			if !ok1 || !ok2 {
				return errors.New("unexpected column types: not a surveysync answers file")
			}
			for j := 0; j < ids.Len(); j++ {
				id := strings.ToLower(ids.Value(j))
				if v, ok := picks[id]; !ok || v != versions.Value(j) {
					continue
				}
				if err := ww.Write(tableRow(rec, fields, j, id)); err != nil {
					return err
				}
				n++
			}
			return nil
		})
		if err != nil {
			ww.Close()
			return fail(n, fmt.Errorf("%s: %w", ansPath, err))
		}
	}
	if err := ww.Close(); err != nil {
		return fail(n, err)
	}
	return n, nil
}

func recColumn(rec arrow.RecordBatch, name string) arrow.Array {
	idx := rec.Schema().FieldIndices(name)
	if len(idx) != 1 {
		return nil
	}
	return rec.Column(idx[0])
}

// tableRow is row j of rec as the values of fields (response_id as id).
func tableRow(rec arrow.RecordBatch, fields []wide.Field, j int, id string) []any {
	row := make([]any, len(fields))
	for k, f := range fields {
		a := recColumn(rec, f.Name)
		if u, ok := a.(*array.Uint16); ok {
			row[k] = uint64(u.Value(j))
			continue
		}
		row[k] = cellValue(a, j)
	}
	row[0] = id
	return row
}
