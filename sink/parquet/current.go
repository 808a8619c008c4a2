package parquet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/surveysync/surveysync/pipeline/flatten"
	"github.com/surveysync/surveysync/sink/warehouse"
)

// CurrentResponse is the latest version (highest _version) of one response
// in a Parquet output.
type CurrentResponse struct {
	ID         string
	SurveyID   int64
	SurveyName string
	Status     string
	Created    time.Time
	Completed  time.Time // zero when null
	Deleted    bool
	Version    uint64
	Rows       int // rows (versions and deletions) seen for the response
}

// Current is what ReadCurrent found under a folder.
type Current struct {
	Files     int   // responses files read
	Rows      int64 // rows in them: every version of every response
	Responses map[string]*CurrentResponse
}

// currentColumns are the responses columns ReadCurrent reads.
var currentColumns = []string{"response_id", "survey_id", "survey_name", "response_status", "date_created", "date_completed", "is_deleted", "_version"}

// ReadCurrent reads every responses file under dir (only those of surveyID
// when it is not 0) and keeps, per response, the row with the highest
// _version. It reads files written by Sink; other files are an error.
func ReadCurrent(ctx context.Context, dir string, surveyID int64) (*Current, error) {
	part := "survey_id=*"
	if surveyID != 0 {
		part = fmt.Sprintf("survey_id=%d", surveyID)
	}
	paths, err := filepath.Glob(filepath.Join(dir, flatten.TableResponses, part, "date=*", "*.parquet"))
	if err != nil {
		return nil, err
	}
	cur := &Current{Files: len(paths), Responses: map[string]*CurrentResponse{}}
	mem := memory.NewGoAllocator()
	for _, path := range paths {
		n, err := readResponsesFile(ctx, mem, path, cur.Responses)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		cur.Rows += n
	}
	return cur, nil
}

func readResponsesFile(ctx context.Context, mem memory.Allocator, path string, cur map[string]*CurrentResponse) (n int64, err error) {
	// A damaged file is an error naming it (ReadCurrent), whatever the
	// Parquet reader does with it.
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("cannot be read, damaged? (%v)", p)
		}
	}()
	pf, err := file.OpenParquetFile(path, false)
	if err != nil {
		return 0, err
	}
	defer pf.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 4096}, mem)
	if err != nil {
		return 0, err
	}
	schema, err := fr.Schema()
	if err != nil {
		return 0, err
	}
	cols := make([]int, len(currentColumns))
	for i, name := range currentColumns {
		idx := schema.FieldIndices(name)
		if len(idx) != 1 {
			return 0, fmt.Errorf("no column %q: not a surveysync responses file", name)
		}
		cols[i] = idx[0]
	}
	rr, err := fr.GetRecordReader(ctx, cols, nil)
	if err != nil {
		return 0, err
	}
	defer rr.Release()
	for rr.Next() {
		rec := rr.RecordBatch()
		ids, ok1 := rec.Column(0).(*array.String)
		surveys, ok2 := rec.Column(1).(*array.Int64)
		names, ok3 := rec.Column(2).(*array.String)
		statuses, ok4 := rec.Column(3).(*array.String)
		created, ok5 := rec.Column(4).(*array.Timestamp)
		completed, ok6 := rec.Column(5).(*array.Timestamp)
		deleted, ok7 := rec.Column(6).(*array.Uint8)
		versions, ok8 := rec.Column(7).(*array.Uint64)
		if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6 && ok7 && ok8) {
			return n, fmt.Errorf("unexpected column types: not a surveysync responses file")
		}
		ts, ok := created.DataType().(*arrow.TimestampType)
		if !ok {
			return n, fmt.Errorf("unexpected column types: not a surveysync responses file")
		}
		unit := ts.Unit
		for i := 0; i < int(rec.NumRows()); i++ {
			n++
			id := ids.Value(i)
			v := versions.Value(i)
			c := cur[id]
			if c == nil {
				c = &CurrentResponse{ID: id}
				cur[id] = c
			}
			c.Rows++
			if c.Version != 0 && v <= c.Version {
				continue
			}
			c.Version = v
			c.SurveyID = surveys.Value(i)
			c.SurveyName = names.Value(i)
			c.Status = statuses.Value(i)
			c.Created = created.Value(i).ToTime(unit).UTC()
			c.Completed = time.Time{}
			if completed.IsValid(i) {
				c.Completed = completed.Value(i).ToTime(unit).UTC()
			}
			c.Deleted = deleted.Value(i) != 0
		}
	}
	if err := rr.Err(); err != nil && !errors.Is(err, io.EOF) {
		return n, err
	}
	return n, nil
}

// Counts counts the current responses per survey, ordered by survey ID,
// and returns the total of current, not deleted, responses.
func (c *Current) Counts() ([]warehouse.SurveyCount, int) {
	bySurvey := map[int64]*warehouse.SurveyCount{}
	total := 0
	for _, r := range c.Responses {
		sc := bySurvey[r.SurveyID]
		if sc == nil {
			sc = &warehouse.SurveyCount{SurveyID: r.SurveyID, ByStatus: map[string]int{}}
			bySurvey[r.SurveyID] = sc
		}
		if r.SurveyName != "" {
			sc.Name = r.SurveyName
		}
		if r.Deleted {
			sc.Deleted++
			continue
		}
		sc.ByStatus[r.Status]++
		sc.Current++
		total++
	}
	counts := make([]warehouse.SurveyCount, 0, len(bySurvey))
	for _, sc := range bySurvey {
		counts = append(counts, *sc)
	}
	sort.Slice(counts, func(i, j int) bool { return counts[i].SurveyID < counts[j].SurveyID })
	return counts, total
}

// Sample returns the n most recently created current (not deleted)
// responses, newest first; ties by ID.
func (c *Current) Sample(n int) []CurrentResponse {
	var live []CurrentResponse
	for _, r := range c.Responses {
		if !r.Deleted {
			live = append(live, *r)
		}
	}
	sort.Slice(live, func(i, j int) bool {
		if !live[i].Created.Equal(live[j].Created) {
			return live[i].Created.After(live[j].Created)
		}
		return live[i].ID < live[j].ID
	})
	if len(live) > n {
		live = live[:n]
	}
	return live
}

// Summarizer returns w: it reads the responses files (ReadCurrent).
func (w *dirWarehouse) Summarizer() warehouse.Summarizer { return w }

// Summary reads the responses files of surveyID (0: all) once: the counts,
// the deletions and a sample. No responses file is an error.
func (w *dirWarehouse) Summary(ctx context.Context, surveyID int64, sample int) (*warehouse.Summary, error) {
	cur, err := ReadCurrent(ctx, w.dir, surveyID)
	if err != nil {
		return nil, err
	}
	if cur.Files == 0 {
		return nil, fmt.Errorf("no responses Parquet files under %s (run `surveysync run` first, or set --parquet-dir)",
			filepath.Join(w.dir, flatten.TableResponses))
	}
	counts, total := cur.Counts()
	sum := &warehouse.Summary{
		About:     fmt.Sprintf("Parquet output under %s: %d responses files, %d rows (every version of every response)", w.dir, cur.Files, cur.Rows),
		Surveys:   counts,
		Total:     total,
		Deletions: true,
		Sampled:   true,
	}
	for _, r := range cur.Sample(sample) {
		sum.Sample = append(sum.Sample, warehouse.SampledResponse{ID: r.ID, SurveyID: r.SurveyID, Status: r.Status,
			Created: r.Created, Completed: r.Completed, Versions: r.Rows})
	}
	return sum, nil
}
