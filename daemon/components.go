package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/surveysync/surveysync/config"
	"github.com/surveysync/surveysync/internal/backoff"
	"github.com/surveysync/surveysync/pipeline/privacy"
	"github.com/surveysync/surveysync/sink/clickhouse"
	"github.com/surveysync/surveysync/sink/parquet"
	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/source/surveyapi"
	"github.com/surveysync/surveysync/survey"
	"github.com/surveysync/surveysync/webhookrx"
)

// The translation of the configuration into the components' options:
// the log, the API client, the warehouse, the ClickHouse sink, the webhook
// receiver and the poller's reconcile interval.

// NewLogger is the log of a command, as log.level and log.format say.
func NewLogger(cfg *config.Config, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.Log.Level))
	opts := &slog.HandlerOptions{Level: level}
	if cfg.Log.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// NewClient is the API client of api:.
func NewClient(cfg *config.Config, log *slog.Logger, reg prometheus.Registerer) (*surveyapi.Client, error) {
	return surveyapi.New(surveyapi.Options{
		BaseURL:        cfg.API.BaseURL.Value(),
		Token:          cfg.API.Token.Value(),
		UserAgent:      cfg.API.UserAgent,
		MaxConcurrency: cfg.API.MaxConcurrency,
		RateLimit:      cfg.API.RateLimit,
		Timeout:        cfg.API.Timeout,
		MaxRetries:     cfg.API.MaxRetries,
		QuotaPause:     cfg.API.QuotaPause,
		Logger:         log.With("component", "api"),
		Registerer:     reg,
	})
}

// OpenWarehouse opens ClickHouse when configured, else the Parquet
// directory, with the privacy rules of its webhook log and feed ledger.
// A command other than run leaves the Parquet folder's temporary files
// alone: they may be a running daemon's writes in flight.
func OpenWarehouse(ctx context.Context, cfg *config.Config, log *slog.Logger, reg prometheus.Registerer) (warehouse.Warehouse, error) {
	// While another surveysync applies the migrations (a daemon starting
	// on a fresh database), a command waits for them: they end by
	// themselves (clickhouse.MigrationsBusyError).
	for n := 1; ; n++ {
		wh, err := openWarehouse(ctx, cfg, log, reg, false)
		var busy *clickhouse.MigrationsBusyError
		if !errors.As(err, &busy) {
			return wh, err
		}
		if n == 1 {
			log.Info("another surveysync applies the migrations; waiting for it", "host", busy.Host, "pid", busy.PID)
		}
		if backoff.Sleep(ctx, busyWaitPolicy.Delay(n)) != nil {
			return nil, err
		}
	}
}

// openWarehouse is OpenWarehouse; owner says this process holds the
// Parquet folder's lock (run), so the temporary files left by a crash
// are its to remove.
func openWarehouse(ctx context.Context, cfg *config.Config, log *slog.Logger, reg prometheus.Registerer, owner bool) (warehouse.Warehouse, error) {
	p, err := newPolicy(cfg)
	if err != nil {
		return nil, err
	}
	wh, err := openBackend(ctx, cfg, log, reg, owner)
	if err != nil {
		return nil, err
	}
	return withPrivacy(wh, p), nil
}

// openBackend opens the warehouse's backend (OpenWarehouse adds the
// privacy rules of its webhook log and feed ledger).
func openBackend(ctx context.Context, cfg *config.Config, log *slog.Logger, reg prometheus.Registerer, owner bool) (warehouse.Warehouse, error) {
	if len(cfg.ClickHouse.Addr) > 0 {
		return clickhouse.OpenWarehouse(ctx, ClickHouseOptions(cfg, log, reg))
	}
	dir, err := filepath.Abs(cfg.Parquet.Dir)
	if err != nil {
		return nil, err
	}
	return parquet.OpenWarehouse(parquet.Options{Dir: dir, Logger: log.With("component", "parquet"), KeepTempFiles: !owner,
		WideChoiceIDs: cfg.Wide.ChoiceIDs})
}

// ClickHouseOptions maps the clickhouse section of the configuration onto
// the sink's options.
func ClickHouseOptions(cfg *config.Config, log *slog.Logger, reg prometheus.Registerer) clickhouse.Options {
	return clickhouse.Options{
		Addr:            cfg.ClickHouse.Addr,
		Database:        cfg.ClickHouse.Database,
		Username:        cfg.ClickHouse.Username,
		Password:        cfg.ClickHouse.Password.Value(),
		Cluster:         cfg.ClickHouse.Cluster,
		Secure:          cfg.ClickHouse.Secure,
		DialTimeout:     cfg.ClickHouse.DialTimeout,
		Unreplicated:    !cfg.ClickHouse.Replicated,
		ZooKeeperPrefix: cfg.ClickHouse.ZooKeeperPrefix,
		DDLTimeout:      cfg.ClickHouse.DDLTimeout,
		InsertQuorum:    cfg.ClickHouse.InsertQuorum,
		Wide:            clickhouse.WideOptions{ChoiceIDs: cfg.Wide.ChoiceIDs, Names: cfg.Wide.ViewNames()},
		Logger:          log.With("component", "clickhouse"),
		Registerer:      reg,
	}
}

// newReceiver builds the webhook receiver; it logs events in the
// warehouse's webhook log when the warehouse has one. The privacy field
// rules rewrite a body before the spool stores it, and erased (nil: none)
// keeps erased responses out of the spool (docs/privacy.md, "The webhook
// spool").
func newReceiver(cfg *config.Config, wh warehouse.Warehouse, p webhookrx.Processor, policy *privacy.Policy, erased func(int64, survey.GUID) bool, log *slog.Logger, reg prometheus.Registerer) (*webhookrx.Receiver, error) {
	w := cfg.Webhooks
	if w.UnsignedAllowed() {
		log.Warn("webhooks.standard_webhooks_secret is set but webhooks.require_signature is false: requests without signature headers are accepted, so the secret stops only senders that sign wrongly; remove require_signature: false to require a signature",
			"component", "webhooks")
	}
	var redact func([]byte) []byte
	var rules string
	if policy.Enabled() {
		redact = policy.Idempotent().WebhookBody
		var err error
		if rules, err = spoolRules(cfg); err != nil {
			return nil, err
		}
	}
	return webhookrx.New(webhookrx.Options{
		Redact:                 redact,
		RedactRules:            rules,
		Erased:                 erased,
		Listen:                 w.Listen,
		Path:                   w.Path.Value(),
		BasicAuthUser:          w.BasicAuth.Username,
		BasicAuthPassword:      w.BasicAuth.Password.Value(),
		AllowCIDRs:             w.AllowCIDRs,
		StandardWebhooksSecret: w.StandardWebhooksSecret.Value(),
		AllowUnsigned:          w.UnsignedAllowed(),
		SignatureTolerance:     w.SignatureTolerance,
		MaxBodyBytes:           int64(w.MaxBodyBytes),
		SpoolDir:               w.SpoolDir,
		SpoolMaxEvents:         w.SpoolMaxEvents,
		SpoolMaxBytes:          int64(w.SpoolMaxBytes),
		ProcessConcurrency:     webhookWorkers,
		Logger:                 log.With("component", "webhooks"),
		Registerer:             reg,
	}, p, wh.WebhookLog())
}

// webhookWorkers is how many webhook events are processed at once. A
// worker waiting for its survey's listing (a flood of webhooks naming
// responses that do not exist, daemon/webhookcheck.go) costs a goroutine
// and nothing else, and every event waiting in a worker is answered by the
// same listing; with too few workers the events behind them wait for the
// next listing after that one. The bodies in workers stay bounded by the
// spool's memory window.
const webhookWorkers = 1024

// spoolRules names the privacy rules the webhook spool's bodies are
// rewritten under (webhookrx.Options.RedactRules): the rules and the
// key's fingerprint.
func spoolRules(cfg *config.Config) (string, error) {
	r, key, err := configuredRules(cfg)
	if err != nil {
		return "", err
	}
	raw, err := json.Marshal(r)
	if err != nil {
		return "", err
	}
	return string(raw) + " key " + privacy.KeyFingerprint(key), nil
}

// reconcileInterval maps sync.reconcile_interval to poll's option: 0 in the
// configuration disables reconcile, where poll takes 0 as its default and
// a negative interval as "off".
func reconcileInterval(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}
