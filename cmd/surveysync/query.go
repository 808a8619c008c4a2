package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
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

var statusOrder = []string{survey.StatusCompleted, survey.StatusDisqualified, survey.StatusQuotaFull, survey.StatusPartial}

func printCounts(w io.Writer, cur *parquet.Current) {
	counts, total := cur.Counts()
	writeCounts(w, counts, total, true)
}

func writeCounts(w io.Writer, counts []parquet.SurveyCount, total int, withDeleted bool) {
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
		name := sc.Name
		if name == "" {
			name = "-"
		}
		fmt.Fprintf(tw, "%d\t%s", sc.SurveyID, name)
		for _, s := range statusOrder {
			fmt.Fprintf(tw, "\t%d", sc.ByStatus[s])
		}
		fmt.Fprintf(tw, "\t%d", sc.Current)
		if withDeleted {
			fmt.Fprintf(tw, "\t%d", sc.Deleted)
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

// queryClickHouse prints responses_current's counts per survey and status
// (daemon.CurrentCounts).
func queryClickHouse(ctx context.Context, cfg *config.Config, q queryFlags, stdout, stderr io.Writer) int {
	log := daemon.NewLogger(cfg, stderr)
	wh, err := daemon.OpenWarehouse(ctx, cfg, log, prometheus.NewRegistry())
	if err != nil {
		fmt.Fprintf(stderr, "surveysync query: %v\nfix: %s\n", err, daemon.SinkFix(cfg))
		return exitFail
	}
	defer wh.Close()
	counts, total, err := daemon.CurrentCounts(ctx, wh, q.survey)
	if err != nil {
		fmt.Fprintln(stderr, "surveysync query:", err)
		return exitFail
	}
	fmt.Fprintf(stdout, "%s\n\n", wh)
	writeCounts(stdout, counts, total, false)
	fmt.Fprintf(stdout, "\nmore: clickhouse-client --query 'SELECT * FROM %s.responses_current LIMIT 5'\n", cfg.ClickHouse.Database)
	return exitOK
}
