package clickhouse

import (
	"context"
	"fmt"

	"github.com/surveysync/surveysync/pipeline/files"
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
func (s *Sink) FeedLedger() (warehouse.FeedLedger, error) { return NewFeedLedger(s), nil }

// Inventory reads responses_current.
func (s *Sink) Inventory() warehouse.Inventory { return s }

// WebhookLog writes webhook_events.
func (s *Sink) WebhookLog() warehouse.WebhookLog { return NewWebhookLog(s) }

// QueryConn is the connection pool.
func (s *Sink) QueryConn() warehouse.QueryConn { return s.conn }

// String names the server and the database.
func (s *Sink) String() string {
	return fmt.Sprintf("ClickHouse %s database %s", s.ServerVersion(), s.Database())
}
