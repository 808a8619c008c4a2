package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/surveysync/surveysync/config"
	"github.com/surveysync/surveysync/daemon"
	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/survey"
)

type queryFlags struct {
	survey int64 // 0: all
	sample int
}

// query prints what the output holds: current responses (the latest version
// of each, deleted ones excluded) per survey and status, and a sample where
// the warehouse takes one. The warehouse's Summarizer reads them; this only
// formats.
func query(ctx context.Context, cfg *config.Config, q queryFlags, stdout, stderr io.Writer) int {
	log := daemon.NewLogger(cfg, stderr)
	wh, err := daemon.OpenWarehouse(ctx, cfg, log, prometheus.NewRegistry())
	if err != nil {
		fmt.Fprintf(stderr, "surveysync query: %v\nfix: %s\n", err, daemon.SinkFixFor(cfg, err))
		return exitFail
	}
	defer wh.Close()
	sum, err := wh.Summarizer().Summary(ctx, q.survey, q.sample)
	if err != nil {
		fmt.Fprintln(stderr, "surveysync query:", err)
		return exitFail
	}
	fmt.Fprintf(stdout, "%s\n\n", sum.About)
	writeCounts(stdout, sum)
	if sum.Sampled && q.sample > 0 {
		writeSample(stdout, sum.Sample)
	}
	if sum.More != "" {
		fmt.Fprintf(stdout, "\nmore: %s\n", sum.More)
	}
	return exitOK
}

var statusOrder = []string{survey.StatusCompleted, survey.StatusDisqualified, survey.StatusQuotaFull, survey.StatusPartial}

// writeCounts prints the counts per survey and status (and the deletions,
// when the warehouse counts them).
func writeCounts(w io.Writer, sum *warehouse.Summary) {
	fmt.Fprintf(w, "current responses (latest version of each, deleted excluded): %d\n\n", sum.Total)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprint(tw, "SURVEY\tNAME")
	for _, s := range statusOrder {
		fmt.Fprintf(tw, "\t%s", s)
	}
	fmt.Fprint(tw, "\tTOTAL")
	if sum.Deletions {
		fmt.Fprint(tw, "\tDELETED")
	}
	fmt.Fprintln(tw)
	for _, sc := range sum.Surveys {
		name := sc.Name
		if name == "" {
			name = "-"
		}
		fmt.Fprintf(tw, "%d\t%s", sc.SurveyID, name)
		for _, s := range statusOrder {
			fmt.Fprintf(tw, "\t%d", sc.ByStatus[s])
		}
		fmt.Fprintf(tw, "\t%d", sc.Current)
		if sum.Deletions {
			fmt.Fprintf(tw, "\t%d", sc.Deleted)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}

// writeSample prints the most recently created current responses.
func writeSample(w io.Writer, live []warehouse.SampledResponse) {
	fmt.Fprintf(w, "\nsample: the %d most recently created current responses\n", len(live))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RESPONSE_ID\tSURVEY\tSTATUS\tDATE_CREATED\tDATE_COMPLETED\tVERSIONS")
	for _, c := range live {
		done := "-"
		if !c.Completed.IsZero() {
			done = c.Completed.Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%d\n", c.ID, c.SurveyID, c.Status, c.Created.Format(time.RFC3339), done, c.Versions)
	}
	tw.Flush()
}
