package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/surveysync/surveysync/config"
	"github.com/surveysync/surveysync/daemon"
	"github.com/surveysync/surveysync/sink/clickhouse"
)

// copyFlags are surveysync copy-from's source.
type copyFlags struct {
	addr, database, user string
	secure               bool
}

// copyFrom copies a single-node surveysync database into the configured
// ClickHouse (docs/operations.md, "Moving a single node to a cluster").
func copyFrom(ctx context.Context, cfg *config.Config, from copyFlags, stdout, stderr io.Writer) int {
	if !cfg.ClickHouse.Enabled() {
		fmt.Fprintln(stderr, "surveysync copy-from: clickhouse.addr is empty: the target of the copy is the configured ClickHouse (the cluster)")
		return exitConfig
	}
	log := daemon.NewLogger(cfg, stderr)
	s, err := clickhouse.Open(ctx, daemon.ClickHouseOptions(cfg, log, prometheus.NewRegistry()))
	if err != nil {
		fmt.Fprintf(stderr, "surveysync copy-from: %v\nfix: %s\n", err, daemon.SinkFix(cfg))
		return exitFail
	}
	defer s.Close()
	password := os.Getenv("SURVEYSYNC_COPY_FROM_PASSWORD")
	reports, err := s.CopyFrom(ctx, clickhouse.CopySource{
		Addr: from.addr, Database: from.database, Username: from.user, Password: password, Secure: from.secure,
	})
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TABLE\tROWS COPIED\tCURRENT (SOURCE)\tCURRENT (TARGET)\tTOOK")
	for _, r := range reports {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\n", r.Table, r.Rows, r.SourceKeys, r.TargetKeys, daemon.RoundDuration(r.Took))
	}
	tw.Flush()
	if err != nil {
		msg := err.Error()
		if password != "" { // CopyFrom redacts already; this line is printed whatever it returns
			msg = strings.ReplaceAll(msg, password, "***")
		}
		fmt.Fprintln(stderr, "surveysync copy-from:", msg)
		fmt.Fprintln(stderr, "  fix the cause and run the same command again: rows already copied collapse with their copies")
		return exitFail
	}
	fmt.Fprintf(stdout, "copied database %s of %s into %s (cluster %q); start the daemon with this configuration\n",
		from.database, from.addr, s.Database(), s.Cluster())
	return exitOK
}
