package clickhouse

import (
	"context"
	"fmt"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/surveysync/surveysync/pipeline/files"
	"github.com/surveysync/surveysync/record"
	"github.com/surveysync/surveysync/sink/warehouse"
)

// OpenWarehouse opens the ClickHouse warehouse: the response tables, with
// sync_state, surveys, uploaded_files, the feed ledger, webhook_events,
// the inventory of current responses for reconcile, and queries for
// clickhouse_query feeds.
func OpenWarehouse(ctx context.Context, o Options) (warehouse.Warehouse, error) {
	s, err := Open(ctx, o)
	if err != nil {
		return nil, err
	}
	return s, nil
}

var _ warehouse.Warehouse = (*Sink)(nil)

// FileIndex is the uploaded_files index.
func (s *Sink) FileIndex() (files.Index, error) { return NewFileIndex(s), nil }

// FeedLedger is the feed ledger in pushed_contacts and message_sends.
func (s *Sink) FeedLedger() (record.FeedLedger, error) { return NewFeedLedger(s), nil }

// Inventory reads responses_current.
func (s *Sink) Inventory() warehouse.Inventory { return s }

// WebhookLog writes webhook_events.
func (s *Sink) WebhookLog() record.WebhookLog { return NewWebhookLog(s) }

// QueryConn runs queries read-only on the connection pool; its rows are
// clickhouse-go's, seen through record.Rows.
func (s *Sink) QueryConn() record.QueryConn { return queryConn{s.conn} }

// queryConn adapts driver.Conn to record.QueryConn. The queries come from
// the configuration (clickhouse_query feeds, `surveysync check`) and run on
// the daemon's read-write connection, so each runs with the setting
// readonly = 2: ClickHouse refuses any write or DDL (INSERT, ALTER, DROP,
// CREATE…, code 164 READONLY) and a change of readonly itself (SETTINGS
// readonly = 0), while other settings may still be set, by the connection
// (sent with every query, in no fixed order) or the query. readonly = 1
// would refuse those too. Checked on 18.16 (TestQueryConnIsReadOnly).
type queryConn struct{ conn driver.Conn }

func (q queryConn) Query(ctx context.Context, query string, args ...any) (record.Rows, error) {
	ctx = ch.Context(ctx, ch.WithSettings(ch.Settings{"readonly": 2}))
	rows, err := q.conn.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return queryRows{rows}, nil
}

// queryRows adapts driver.Rows to record.Rows: only ColumnTypes differs.
type queryRows struct{ driver.Rows }

func (r queryRows) ColumnTypes() []record.ColumnType {
	types := r.Rows.ColumnTypes()
	out := make([]record.ColumnType, len(types))
	for i, t := range types {
		out[i] = t
	}
	return out
}

// String names the server and the database.
func (s *Sink) String() string {
	return fmt.Sprintf("ClickHouse %s database %s", s.ServerVersion(), s.Database())
}
