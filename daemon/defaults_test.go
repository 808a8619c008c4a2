package daemon

import (
	"testing"
	"time"

	"github.com/surveysync/surveysync/config"
	"github.com/surveysync/surveysync/sink/blob"
	"github.com/surveysync/surveysync/sink/clickhouse"
	"github.com/surveysync/surveysync/source/feed"
	"github.com/surveysync/surveysync/source/surveyapi"
	"github.com/surveysync/surveysync/webhookrx"
)

// The client's defaults are the configuration's, so a zero option and an
// unset key mean the same.
func TestClientDefaultsAreTheConfigs(t *testing.T) {
	c := config.Default().API
	if c.MaxConcurrency != surveyapi.DefaultMaxConcurrency || c.MaxRetries != surveyapi.DefaultMaxRetries ||
		c.Timeout != surveyapi.DefaultTimeout || c.QuotaPause != surveyapi.DefaultQuotaPause {
		t.Errorf("api defaults: config %d %d %s %s, surveyapi %d %d %s %s",
			c.MaxConcurrency, c.MaxRetries, c.Timeout, c.QuotaPause, surveyapi.DefaultMaxConcurrency,
			surveyapi.DefaultMaxRetries, surveyapi.DefaultTimeout, surveyapi.DefaultQuotaPause)
	}
}

// The feed, files copier, webhook receiver and ClickHouse defaults are the
// configuration's too.
func TestPackageDefaultsAreTheConfigs(t *testing.T) {
	type pair struct {
		what     string
		cfg, pkg any
	}
	d := config.Default()
	for _, p := range []pair{
		{"feeds[].concurrency", config.DefaultFeedConcurrency, feed.DefaultConcurrency},
		{"feeds[].interval (csv_dir)", config.DefaultCSVDirInterval, feed.DefaultCSVDirInterval},
		{"feeds[].interval (clickhouse_query)", config.DefaultQueryInterval, feed.DefaultQueryInterval},
		{"feeds[].http.max_body_bytes", int64(config.DefaultFeedBodyBytes), int64(feed.DefaultMaxBodyBytes)},
		{"files.max_concurrency", d.Files.MaxConcurrency, blob.DefaultMaxConcurrency},
		{"files.max_size", int64(d.Files.MaxSize), blob.DefaultMaxSize},
		{"webhooks.signature_tolerance", d.Webhooks.SignatureTolerance, webhookrx.DefaultSignatureTolerance},
		{"webhooks.max_body_bytes", int64(d.Webhooks.MaxBodyBytes), webhookrx.DefaultMaxBodyBytes},
		{"webhooks.spool_max_events", d.Webhooks.SpoolMaxEvents, webhookrx.DefaultSpoolMaxEvents},
		{"webhooks.spool_max_bytes", int64(d.Webhooks.SpoolMaxBytes), webhookrx.DefaultSpoolMaxBytes},
		{"clickhouse.dial_timeout", d.ClickHouse.DialTimeout, clickhouse.DefaultDialTimeout},
		{"clickhouse.ddl_timeout", d.ClickHouse.DDLTimeout, clickhouse.DefaultDDLTimeout},
		{"clickhouse.zookeeper_prefix", d.ClickHouse.ZooKeeperPrefix, clickhouse.DefaultZooKeeperPrefix},
	} {
		if p.cfg != p.pkg {
			t.Errorf("%s: config default %v (%T), package default %v (%T)", p.what, p.cfg, p.cfg, p.pkg, p.pkg)
		}
	}
}

// sync.reconcile_interval: 0 disables reconcile (poll's own zero means its
// default, 6 h).
func TestReconcileIntervalZeroDisables(t *testing.T) {
	if got := reconcileInterval(0); got >= 0 {
		t.Fatalf("reconcile_interval 0 → %v, want a negative (disabled) interval", got)
	}
	if got := reconcileInterval(time.Hour); got != time.Hour {
		t.Fatalf("reconcile_interval 1h → %v", got)
	}
}
