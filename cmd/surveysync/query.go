package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/apache/arrow/go/v17/parquet/file"
	"github.com/apache/arrow/go/v17/parquet/pqarrow"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/surveysync/surveysync/config"
	"github.com/surveysync/surveysync/pipeline/flatten"
	"github.com/surveysync/surveysync/pipeline/survey"
)

type queryFlags struct {
	survey int64 // 0: all
	sample int
}

// currentRow is the latest version of one response in the Parquet output.
type currentRow struct {
	id            string
	surveyID      int64
	surveyName    string
	status        string
	created       time.Time
	completed     time.Time // zero when null
	deleted       bool
	version       uint64
	rowsOfVersion int // rows (versions and deletions) seen for the response
}

// queryColumns are the responses columns query reads.
var queryColumns = []string{"response_id", "survey_id", "survey_name", "response_status", "date_created", "date_completed", "is_deleted", "_version"}

// query prints what the output holds: current responses (the latest version
// of each, deleted ones excluded) per survey and status, and a sample. It
// reads the Parquet files itself; for ClickHouse it counts
// responses_current.
func query(ctx context.Context, cfg *config.Config, q queryFlags, stdout, stderr io.Writer) int {
	if len(cfg.ClickHouse.Addr) > 0 {
		return queryClickHouse(ctx, cfg, q, stdout, stderr)
	}
	dir, err := filepath.Abs(cfg.Parquet.Dir)
	if err != nil {
		fmt.Fprintln(stderr, "surveysync query:", err)
		return exitFail
	}
	cur, files, rows, err := readCurrent(ctx, dir, q.survey)
	if err != nil {
		fmt.Fprintln(stderr, "surveysync query:", err)
		return exitFail
	}
	if files == 0 {
		fmt.Fprintf(stderr, "surveysync query: no responses Parquet files under %s (run `surveysync run` first, or set --parquet-dir)\n", filepath.Join(dir, flatten.TableResponses))
		return exitFail
	}
	fmt.Fprintf(stdout, "Parquet output under %s: %d responses files, %d rows (every version of every response)\n\n", dir, files, rows)
	printCounts(stdout, cur)
	if q.sample > 0 {
		printSample(stdout, cur, q.sample)
	}
	return exitOK
}

// readCurrent reads every responses file under dir and keeps, per response,
// the row with the highest _version.
func readCurrent(ctx context.Context, dir string, surveyID int64) (map[string]*currentRow, int, int64, error) {
	pattern := filepath.Join(dir, flatten.TableResponses, "survey_id=*", "date=*", "*.parquet")
	if surveyID != 0 {
		pattern = filepath.Join(dir, flatten.TableResponses, fmt.Sprintf("survey_id=%d", surveyID), "date=*", "*.parquet")
	}
	paths, err := filepath.Glob(pattern)
	if err != nil {
		return nil, 0, 0, err
	}
	cur := map[string]*currentRow{}
	var rows int64
	mem := memory.NewGoAllocator()
	for _, path := range paths {
		n, err := readResponsesFile(ctx, mem, path, cur)
		if err != nil {
			return nil, 0, 0, fmt.Errorf("%s: %w", path, err)
		}
		rows += n
	}
	return cur, len(paths), rows, nil
}

func readResponsesFile(ctx context.Context, mem memory.Allocator, path string, cur map[string]*currentRow) (int64, error) {
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
	cols := make([]int, len(queryColumns))
	for i, name := range queryColumns {
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
	var n int64
	for rr.Next() {
		rec := rr.Record()
		ids, ok1 := rec.Column(0).(*array.String)
		surveys, ok2 := rec.Column(1).(*array.Int64)
		names, ok3 := rec.Column(2).(*array.String)
		statuses, ok4 := rec.Column(3).(*array.String)
		created, ok5 := rec.Column(4).(*array.Timestamp)
		completed, ok6 := rec.Column(5).(*array.Timestamp)
		deleted, ok7 := rec.Column(6).(*array.Uint8)
		versions, ok8 := rec.Column(7).(*array.Uint64)
		ts, ok9 := created.DataType().(*arrow.TimestampType)
		if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6 && ok7 && ok8 && ok9) {
			return n, fmt.Errorf("unexpected column types: not a surveysync responses file")
		}
		unit := ts.Unit
		for i := 0; i < int(rec.NumRows()); i++ {
			n++
			id := ids.Value(i)
			v := versions.Value(i)
			c := cur[id]
			if c == nil {
				c = &currentRow{id: id}
				cur[id] = c
			}
			c.rowsOfVersion++
			if c.version != 0 && v <= c.version {
				continue
			}
			c.version = v
			c.surveyID = surveys.Value(i)
			c.surveyName = names.Value(i)
			c.status = statuses.Value(i)
			c.created = created.Value(i).ToTime(unit).UTC()
			c.completed = time.Time{}
			if completed.IsValid(i) {
				c.completed = completed.Value(i).ToTime(unit).UTC()
			}
			c.deleted = deleted.Value(i) != 0
		}
	}
	if err := rr.Err(); err != nil && err != io.EOF {
		return n, err
	}
	return n, nil
}

type surveyCount struct {
	id       int64
	name     string
	byStatus map[string]int
	current  int
	deleted  int
}

var statusOrder = []string{survey.StatusCompleted, survey.StatusDisqualified, survey.StatusQuotaFull, survey.StatusPartial}

func printCounts(w io.Writer, cur map[string]*currentRow) {
	bySurvey := map[int64]*surveyCount{}
	total := 0
	for _, c := range cur {
		sc := bySurvey[c.surveyID]
		if sc == nil {
			sc = &surveyCount{id: c.surveyID, byStatus: map[string]int{}}
			bySurvey[c.surveyID] = sc
		}
		if c.surveyName != "" {
			sc.name = c.surveyName
		}
		if c.deleted {
			sc.deleted++
			continue
		}
		sc.byStatus[c.status]++
		sc.current++
		total++
	}
	counts := make([]surveyCount, 0, len(bySurvey))
	for _, sc := range bySurvey {
		counts = append(counts, *sc)
	}
	sort.Slice(counts, func(i, j int) bool { return counts[i].id < counts[j].id })
	writeCounts(w, counts, total, true)
}

func writeCounts(w io.Writer, counts []surveyCount, total int, withDeleted bool) {
	fmt.Fprintf(w, "current responses (latest version of each, deleted excluded): %d\n\n", total)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprint(tw, "SURVEY\tNAME")
	for _, s := range statusOrder {
		fmt.Fprintf(tw, "\t%s", s)
	}
	fmt.Fprint(tw, "\tTOTAL")
	if withDeleted {
		fmt.Fprint(tw, "\tDELETED")
	}
	fmt.Fprintln(tw)
	for _, sc := range counts {
		name := sc.name
		if name == "" {
			name = "-"
		}
		fmt.Fprintf(tw, "%d\t%s", sc.id, name)
		for _, s := range statusOrder {
			fmt.Fprintf(tw, "\t%d", sc.byStatus[s])
		}
		fmt.Fprintf(tw, "\t%d", sc.current)
		if withDeleted {
			fmt.Fprintf(tw, "\t%d", sc.deleted)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}

// printSample prints the n most recently created current responses.
func printSample(w io.Writer, cur map[string]*currentRow, n int) {
	var live []*currentRow
	for _, c := range cur {
		if !c.deleted {
			live = append(live, c)
		}
	}
	sort.Slice(live, func(i, j int) bool {
		if !live[i].created.Equal(live[j].created) {
			return live[i].created.After(live[j].created)
		}
		return live[i].id < live[j].id
	})
	if len(live) > n {
		live = live[:n]
	}
	fmt.Fprintf(w, "\nsample: the %d most recently created current responses\n", len(live))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RESPONSE_ID\tSURVEY\tSTATUS\tDATE_CREATED\tDATE_COMPLETED\tVERSIONS")
	for _, c := range live {
		done := "-"
		if !c.completed.IsZero() {
			done = c.completed.Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%d\n", c.id, c.surveyID, c.status, c.created.Format(time.RFC3339), done, c.rowsOfVersion)
	}
	tw.Flush()
}

// queryClickHouse counts responses_current per survey and status.
func queryClickHouse(ctx context.Context, cfg *config.Config, q queryFlags, stdout, stderr io.Writer) int {
	log := newLogger(cfg, stderr)
	wh, err := openWarehouse(ctx, cfg, log, prometheus.NewRegistry())
	if err != nil {
		fmt.Fprintln(stderr, "surveysync query:", err)
		return exitFail
	}
	defer wh.Close()
	inv := wh.Inventory()
	if inv == nil {
		fmt.Fprintln(stderr, "surveysync query: the warehouse keeps no inventory of current responses")
		return exitFail
	}
	ids := map[int64]string{}
	if q.survey != 0 {
		ids[q.survey] = ""
	} else {
		states, err := wh.LoadStates(ctx)
		if err != nil {
			fmt.Fprintln(stderr, "surveysync query:", err)
			return exitFail
		}
		for _, s := range states {
			ids[s.SurveyID] = ""
		}
	}
	if surveys, err := wh.LoadSurveys(ctx); err == nil {
		for _, s := range surveys {
			if _, ok := ids[s.SurveyID]; ok {
				ids[s.SurveyID] = s.Name
			}
		}
	}
	fmt.Fprintf(stdout, "%s\n\n", wh)
	var counts []surveyCount
	total := 0
	for id, name := range ids {
		cur, err := inv.CurrentResponses(ctx, id)
		if err != nil {
			fmt.Fprintln(stderr, "surveysync query:", err)
			return exitFail
		}
		sc := surveyCount{id: id, name: name, byStatus: map[string]int{}, current: len(cur)}
		for _, s := range cur {
			sc.byStatus[s]++
		}
		total += len(cur)
		counts = append(counts, sc)
	}
	sort.Slice(counts, func(i, j int) bool { return counts[i].id < counts[j].id })
	writeCounts(stdout, counts, total, false)
	fmt.Fprintf(stdout, "\nmore: clickhouse-client --query 'SELECT * FROM %s.responses_current LIMIT 5'\n", cfg.ClickHouse.Database)
	return exitOK
}
