package config_test

import (
	"testing"

	"github.com/surveysync/surveysync/config"
	"github.com/surveysync/surveysync/internal/ha"
	"github.com/surveysync/surveysync/pipeline"
	"github.com/surveysync/surveysync/sink/blob"
	"github.com/surveysync/surveysync/sink/clickhouse"
	"github.com/surveysync/surveysync/source/poll"
	"github.com/surveysync/surveysync/source/surveyapi"
	"github.com/surveysync/surveysync/webhookrx"
)

// A key left unset and a zero option mean the same: config's defaults are
// the components' Default* constants. config refers to most of them (the
// per-feed ones too, in Feed.setDefaults); the clickhouse.* and files.*
// keys are restated, since config does not link the ClickHouse driver or
// the object-storage SDKs, and this test is what keeps those equal.
func TestDefaultsAreTheComponents(t *testing.T) {
	d := config.Default()
	for _, p := range []struct {
		key      string
		cfg, pkg any
	}{
		{"api.max_concurrency", d.API.MaxConcurrency, surveyapi.DefaultMaxConcurrency},
		{"api.timeout", d.API.Timeout, surveyapi.DefaultTimeout},
		{"api.max_retries", d.API.MaxRetries, surveyapi.DefaultMaxRetries},
		{"api.quota_pause", d.API.QuotaPause, surveyapi.DefaultQuotaPause},
		{"sync.poll_interval", d.Sync.PollInterval, poll.DefaultPollInterval},
		{"sync.overlap", d.Sync.Overlap, poll.DefaultOverlap},
		{"sync.partial_lookback", d.Sync.PartialLookback, poll.DefaultPartialLookback},
		{"sync.partial_rescan_interval", d.Sync.PartialRescan, poll.DefaultPartialRescanInterval},
		{"sync.reconcile_interval", d.Sync.ReconcileInterval, poll.DefaultReconcileInterval},
		{"sync.backfill_from", d.Sync.BackfillFrom, poll.DefaultBackfillFrom()},
		{"sync.fetch_concurrency", d.Sync.FetchConcurrency, pipeline.DefaultFetchConcurrency},
		{"sync.batch.max_rows", d.Sync.Batch.MaxRows, pipeline.DefaultMaxRows},
		{"sync.batch.max_bytes", int64(d.Sync.Batch.MaxBytes), int64(pipeline.DefaultMaxBytes)},
		{"sync.batch.max_delay", d.Sync.Batch.MaxDelay, pipeline.DefaultMaxDelay},
		{"webhooks.signature_tolerance", d.Webhooks.SignatureTolerance, webhookrx.DefaultSignatureTolerance},
		{"webhooks.max_body_bytes", int64(d.Webhooks.MaxBodyBytes), webhookrx.DefaultMaxBodyBytes},
		{"webhooks.spool_max_events", d.Webhooks.SpoolMaxEvents, webhookrx.DefaultSpoolMaxEvents},
		{"webhooks.spool_max_bytes", int64(d.Webhooks.SpoolMaxBytes), webhookrx.DefaultSpoolMaxBytes},
		{"clickhouse.database", d.ClickHouse.Database, clickhouse.DefaultDatabase},
		{"clickhouse.dial_timeout", d.ClickHouse.DialTimeout, clickhouse.DefaultDialTimeout},
		{"clickhouse.ddl_timeout", d.ClickHouse.DDLTimeout, clickhouse.DefaultDDLTimeout},
		{"clickhouse.zookeeper_prefix", d.ClickHouse.ZooKeeperPrefix, clickhouse.DefaultZooKeeperPrefix},
		{"files.max_concurrency", d.Files.MaxConcurrency, blob.DefaultMaxConcurrency},
		{"files.max_size", int64(d.Files.MaxSize), blob.DefaultMaxSize},
		{"ha.session_timeout", d.HA.SessionTimeout, ha.DefaultSessionTimeout},
	} {
		if p.cfg != p.pkg {
			t.Errorf("%s: config default %v (%T), package default %v (%T)", p.key, p.cfg, p.cfg, p.pkg, p.pkg)
		}
	}
}
