// Package chtest gives integration tests in other packages the ClickHouse
// target of the test run: the single server of SURVEYSYNC_TEST_CLICKHOUSE_ADDR,
// or, with SURVEYSYNC_TEST_CLICKHOUSE_ON_CLUSTER=1 (make test-cluster), the
// test cluster SURVEYSYNC_TEST_CLICKHOUSE_CLUSTER at
// SURVEYSYNC_TEST_CLICKHOUSE_CLUSTER_ADDR (scripts/cluster-up.sh).
package chtest

import (
	"context"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/surveysync/surveysync/sink/clickhouse"
)

// OnCluster reports whether the integration tests target the cluster.
func OnCluster() bool { return os.Getenv("SURVEYSYNC_TEST_CLICKHOUSE_ON_CLUSTER") == "1" }

// Options are the Options of a test Sink on database db, and false when no
// ClickHouse is configured for the tests (skip them then).
func Options(db string) (clickhouse.Options, bool) {
	addr := os.Getenv("SURVEYSYNC_TEST_CLICKHOUSE_ADDR")
	cluster := ""
	if OnCluster() {
		addr = os.Getenv("SURVEYSYNC_TEST_CLICKHOUSE_CLUSTER_ADDR")
		cluster = os.Getenv("SURVEYSYNC_TEST_CLICKHOUSE_CLUSTER")
	}
	if addr == "" {
		return clickhouse.Options{}, false
	}
	return clickhouse.Options{
		Addr:       strings.Split(addr, ","),
		Database:   db,
		Cluster:    cluster,
		Registerer: prometheus.NewRegistry(),
	}, true
}

// DropDatabase drops s's database, on every node of its cluster.
func DropDatabase(ctx context.Context, s *clickhouse.Sink) error {
	q := "DROP DATABASE IF EXISTS " + s.Database()
	if s.Cluster() != "" {
		q += " ON CLUSTER " + s.Cluster()
	}
	return s.Conn().Exec(ctx, q)
}
