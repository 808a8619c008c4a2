package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/surveysync/surveysync/config"
	"github.com/surveysync/surveysync/daemon"
	"github.com/surveysync/surveysync/sink/clickhouse"
)

// viewsFlags are surveysync views' flags.
type viewsFlags struct {
	surveys []int64
	refresh bool
	columns bool
}

// views lists the wide views survey_<id> (docs/schema.md, "Wide tables"),
// or with --refresh records the columns of every answered question and
// replaces the views (for a warehouse filled before wide views existed;
// the daemon keeps them current by itself).
func views(ctx context.Context, cfg *config.Config, f viewsFlags, stdout, stderr io.Writer) int {
	if !cfg.ClickHouse.Enabled() {
		fmt.Fprintln(stderr, "surveysync views: clickhouse.addr is empty: wide views live in ClickHouse (for Parquet output, see docs/parquet.md)")
		return exitConfig
	}
	log := daemon.NewLogger(cfg, stderr)
	s, err := clickhouse.Open(ctx, daemon.ClickHouseOptions(cfg, log, prometheus.NewRegistry()))
	if err != nil {
		fmt.Fprintf(stderr, "surveysync views: %v\nfix: %s\n", err, daemon.SinkFix(cfg))
		return exitFail
	}
	defer s.Close()
	var vs []clickhouse.WideView
	if f.refresh {
		vs, err = s.RefreshWideViews(ctx, f.surveys...)
	} else {
		vs, err = s.WideViews(ctx, f.surveys...)
	}
	if err != nil {
		fmt.Fprintln(stderr, "surveysync views:", err)
		return exitFail
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	if f.columns {
		fmt.Fprintln(tw, "VIEW\tCOLUMN\tTYPE\tQUESTION\tVARIABLE\tTITLE")
		for _, v := range vs {
			for _, c := range v.Columns {
				title := c.Title
				if c.RowLabel != "" {
					title += " — " + c.RowLabel
				}
				if c.Part == "other" {
					title += " (other)"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", v.View, c.Name, c.Type(), c.QuestionID, c.Variable, title)
			}
		}
	} else {
		fmt.Fprintln(tw, "SURVEY\tVIEW\tQUESTION COLUMNS\tALSO NAMED")
		for _, v := range vs {
			fmt.Fprintf(tw, "%d\t%s\t%d\t%s\n", v.SurveyID, v.View, len(v.Columns), v.Alias)
		}
	}
	tw.Flush()
	if f.refresh {
		fmt.Fprintf(stdout, "replaced %d wide views\n", len(vs))
	}
	return exitOK
}
