package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/surveysync/surveysync/config"
	"github.com/surveysync/surveysync/daemon"
	"github.com/surveysync/surveysync/pipeline/flatten"
	"github.com/surveysync/surveysync/sink/parquet"
	"github.com/surveysync/surveysync/survey"
)

type queryFlags struct {
	survey int64 // 0: all
	sample int
}

// query prints what the output holds: current responses (the latest version
// of each, deleted ones excluded) per survey and status, and a sample. For
// Parquet, sink/parquet reads the files (parquet.ReadCurrent) and this only
// formats; for ClickHouse it counts responses_current.
func query(ctx context.Context, cfg *config.Config, q queryFlags, stdout, stderr io.Writer) int {
	if len(cfg.ClickHouse.Addr) > 0 {
		return queryClickHouse(ctx, cfg, q, stdout, stderr)
	}
	dir, err := filepath.Abs(cfg.Parquet.Dir)
	if err != nil {
		fmt.Fprintln(stderr, "surveysync query:", err)
		return exitFail
	}
	cur, err := parquet.ReadCurrent(ctx, dir, q.survey)
	if err != nil {
		fmt.Fprintln(stderr, "surveysync query:", err)
		return exitFail
	}
	if cur.Files == 0 {
		fmt.Fprintf(stderr, "surveysync query: no responses Parquet files under %s (run `surveysync run` first, or set --parquet-dir)\n", filepath.Join(dir, flatten.TableResponses))
		return exitFail
	}
	fmt.Fprintf(stdout, "Parquet output under %s: %d responses files, %d rows (every version of every response)\n\n", dir, cur.Files, cur.Rows)
	printCounts(stdout, cur)
	if q.sample > 0 {
		printSample(stdout, cur, q.sample)
	}
	return exitOK
}

type surveyCount struct {
	id       int64
	name     string
	byStatus map[string]int
	current  int
	deleted  int
}

var statusOrder = []string{survey.StatusCompleted, survey.StatusDisqualified, survey.StatusQuotaFull, survey.StatusPartial}

func printCounts(w io.Writer, cur *parquet.Current) {
	pc, total := cur.Counts()
	counts := make([]surveyCount, len(pc))
	for i, c := range pc {
		counts[i] = surveyCount{id: c.SurveyID, name: c.Name, byStatus: c.ByStatus, current: c.Current, deleted: c.Deleted}
	}
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
func printSample(w io.Writer, cur *parquet.Current, n int) {
	live := cur.Sample(n)
	fmt.Fprintf(w, "\nsample: the %d most recently created current responses\n", len(live))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RESPONSE_ID\tSURVEY\tSTATUS\tDATE_CREATED\tDATE_COMPLETED\tVERSIONS")
	for _, c := range live {
		done := "-"
		if !c.Completed.IsZero() {
			done = c.Completed.Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%d\n", c.ID, c.SurveyID, c.Status, c.Created.Format(time.RFC3339), done, c.Rows)
	}
	tw.Flush()
}

// queryClickHouse counts responses_current per survey and status.
func queryClickHouse(ctx context.Context, cfg *config.Config, q queryFlags, stdout, stderr io.Writer) int {
	log := daemon.NewLogger(cfg, stderr)
	wh, err := daemon.OpenWarehouse(ctx, cfg, log, prometheus.NewRegistry())
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
