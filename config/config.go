// Package config is surveysync's configuration: one typed Config tree,
// loaded in layers (defaults in code → one YAML file → SURVEYSYNC_*
// environment variables → command-line flags), decoded strictly (an unknown
// key or a value of the wrong type is an error naming the key and where it
// came from) and validated as a whole (Validate reports every problem at
// once, each naming its key path).
//
// Secrets (tokens, passwords, keys, the webhook path) have their own types
// (Secret, SecretPath, URL) that print masked however they are formatted;
// Value returns the real value. Config.Print writes the effective
// configuration as YAML with every secret masked.
//
// The Config is passed down explicitly; there is no global. Each package
// keeps its own Options struct and cmd/surveysync maps a Config onto them.
// docs/configuration.md lists every key, its default and its environment
// variable.
package config

import (
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/surveysync/surveysync/internal/ha"
	"github.com/surveysync/surveysync/pipeline"
	"github.com/surveysync/surveysync/pipeline/files"
	"github.com/surveysync/surveysync/source/feed"
	"github.com/surveysync/surveysync/source/poll"
	"github.com/surveysync/surveysync/source/surveyapi"
	"github.com/surveysync/surveysync/webhookrx"
)

// Config is the whole configuration. Field tags name the YAML keys.
type Config struct {
	API     API     `koanf:"api"`
	Surveys []int64 `koanf:"surveys"` // survey ids to sync; webhooks add more at run time
	// SurveysExclude are survey ids never synced: webhooks (survey_launched,
	// response_received) and the surveys table cannot add them, and a
	// reload stops polling them (docs/operations.md).
	SurveysExclude []int64    `koanf:"surveys_exclude"`
	Sync           Sync       `koanf:"sync"`
	Webhooks       Webhooks   `koanf:"webhooks"`
	ClickHouse     ClickHouse `koanf:"clickhouse"`
	Parquet        Parquet    `koanf:"parquet"`
	Files          Files      `koanf:"files"`
	Metrics        Metrics    `koanf:"metrics"`
	Shutdown       Shutdown   `koanf:"shutdown"`
	Log            Log        `koanf:"log"`
	Demo           Demo       `koanf:"demo"`
	Feeds          []Feed     `koanf:"feeds"`
	Privacy        Privacy    `koanf:"privacy"`
	HA             HA         `koanf:"ha"`
	Wide           Wide       `koanf:"wide"`
	Verify         Verify     `koanf:"verify"`
}

// API is how surveysync calls the survey service (docs/api.md §5).
type API struct {
	BaseURL        URL           `koanf:"base_url"`        // ends in /v1
	Token          Secret        `koanf:"token"`           // X-API-TOKEN; not needed when demo.emulator.enabled
	UserAgent      string        `koanf:"user_agent"`      // "<app_name> (<contact_email>)"
	MaxConcurrency int           `koanf:"max_concurrency"` // requests in flight, whole process
	RateLimit      float64       `koanf:"rate_limit"`      // requests per second, whole process; 0 = no limit
	Timeout        time.Duration `koanf:"timeout"`         // per request
	MaxRetries     int           `koanf:"max_retries"`     // for 429, 5xx and network errors
	QuotaPause     time.Duration `koanf:"quota_pause"`     // pause after a 402 (monthly quota used up)
	MonthlyBudget  int64         `koanf:"monthly_budget"`  // API calls per month the poller plans to; 0 = unlimited
}

// Sync is how responses are polled and written.
type Sync struct {
	Statuses          []string      `koanf:"statuses"`                // streams: completed, disqualified, quotafull, partial
	PollInterval      time.Duration `koanf:"poll_interval"`           // how often each stream is polled
	Overlap           time.Duration `koanf:"overlap"`                 // a window starts this far before the watermark
	SettleLag         time.Duration `koanf:"settle_lag"`              // a window ends this far before now
	PartialLookback   time.Duration `koanf:"partial_lookback"`        // partial responses are re-read this far back
	PartialRescan     time.Duration `koanf:"partial_rescan_interval"` // how often that whole lookback is re-read
	ReconcileInterval time.Duration `koanf:"reconcile_interval"`      // 0 disables the deletion/status reconcile pass
	EraseDeleted      bool          `koanf:"erase_deleted"`           // a response deleted at the source is erased physically (docs/privacy.md)
	BackfillFrom      time.Time     `koanf:"backfill_from"`           // where a new stream's watermark starts
	FetchConcurrency  int           `koanf:"fetch_concurrency"`       // response details fetched at once
	Batch             Batch         `koanf:"batch"`
}

// Verify is the daemon's continuous verification (docs/operations.md,
// "Verification"): every Interval each polled survey's streams are
// compared with the warehouse, counts first.
type Verify struct {
	Interval time.Duration `koanf:"interval"` // between two passes over every survey; 0 disables
	Sample   int           `koanf:"sample"`   // current responses re-read per survey per pass to compare their content
	Repair   bool          `koanf:"repair"`   // re-read what differs through the pipeline
}

// The defaults of verify.*: values only the daemon uses.
const (
	DefaultVerifyInterval = time.Hour
	DefaultVerifySample   = 10
)

// Batch bounds a write to the sinks: whichever limit is reached first
// flushes.
type Batch struct {
	MaxRows  int           `koanf:"max_rows"`  // answers rows
	MaxBytes ByteSize      `koanf:"max_bytes"` // estimated in-memory size
	MaxDelay time.Duration `koanf:"max_delay"` // age of the oldest row
}

// Webhooks is the receiver of the service's webhooks (docs/api.md,
// section 11). The service signs nothing: the secret is a segment of Path.
type Webhooks struct {
	Enabled                bool       `koanf:"enabled"`
	Listen                 string     `koanf:"listen"`                   // host:port
	Path                   SecretPath `koanf:"path"`                     // e.g. /hooks/<random secret, >= 16 chars>
	SpoolDir               string     `koanf:"spool_dir"`                // events are durable here before the 2xx
	SpoolMaxEvents         int        `koanf:"spool_max_events"`         // beyond either limit the receiver answers 503
	SpoolMaxBytes          ByteSize   `koanf:"spool_max_bytes"`          //
	BasicAuth              BasicAuth  `koanf:"basic_auth"`               // optional
	AllowCIDRs             []string   `koanf:"allow_cidrs"`              // optional allow-list of senders
	StandardWebhooksSecret Secret     `koanf:"standard_webhooks_secret"` // optional; "whsec_<base64>" or a raw key, at least 16 bytes
	// RequireSignature rejects requests without Standard Webhooks headers.
	// Unset (nil): required exactly when StandardWebhooksSecret is set; an
	// explicit false with a secret keeps accepting unsigned requests (the
	// daemon warns at start). Read it through SignatureRequired.
	RequireSignature   *bool         `koanf:"require_signature"`
	SignatureTolerance time.Duration `koanf:"signature_tolerance"` // max age/skew of webhook-timestamp
	MaxBodyBytes       ByteSize      `koanf:"max_body_bytes"`
}

// SignatureRequired reports whether the receiver refuses requests without
// Standard Webhooks headers: webhooks.require_signature when it is set,
// else whether webhooks.standard_webhooks_secret is.
func (w Webhooks) SignatureRequired() bool {
	if w.RequireSignature != nil {
		return *w.RequireSignature
	}
	return w.StandardWebhooksSecret.IsSet()
}

// UnsignedAllowed reports the weakened setting the daemon warns about: a
// secret is configured but webhooks.require_signature: false lets requests
// without signature headers through.
func (w Webhooks) UnsignedAllowed() bool {
	return w.StandardWebhooksSecret.IsSet() && !w.SignatureRequired()
}

// BasicAuth is optional HTTP basic authentication; both or neither.
type BasicAuth struct {
	Username string `koanf:"username"`
	Password Secret `koanf:"password"`
}

// ClickHouse is the warehouse. With no Addr, responses go to Parquet files.
type ClickHouse struct {
	Addr        []string      `koanf:"addr"` // host:port of the native protocol; empty = no ClickHouse
	Database    string        `koanf:"database"`
	Username    string        `koanf:"username"`
	Password    Secret        `koanf:"password"`
	Cluster     string        `koanf:"cluster"` // optional: ON CLUSTER DDL and Distributed tables
	Secure      bool          `koanf:"secure"`  // TLS
	DialTimeout time.Duration `koanf:"dial_timeout"`
	// Cluster mode only: Replicated* engines for the _local tables (default
	// true), the ZooKeeper path prefix of those tables, and how long an ON
	// CLUSTER statement waits for every node.
	Replicated      bool          `koanf:"replicated"`
	ZooKeeperPrefix string        `koanf:"zookeeper_prefix"`
	DDLTimeout      time.Duration `koanf:"ddl_timeout"`
	InsertQuorum    int           `koanf:"insert_quorum"`
}

// Enabled reports whether a ClickHouse is configured (else the Parquet sink
// is used).
func (ch ClickHouse) Enabled() bool { return len(ch.Addr) > 0 }

// Wide is the wide tables (docs/schema.md, "Wide tables"): ClickHouse's
// views survey_<id> and the exports.
type Wide struct {
	// ChoiceIDs adds beside each single-choice column (and each matrix row
	// with one answer) a column <name>_id: the chosen option's id.
	ChoiceIDs bool `koanf:"choice_ids"`
	// Names gives surveys a friendly view name besides survey_<id>, by
	// survey id: {"4574": "spokojenost_2026"}.
	Names map[string]string `koanf:"names"`
}

// ViewNames are Names by survey id (Validate checks the ids).
func (w Wide) ViewNames() map[int64]string {
	out := map[int64]string{}
	for k, v := range w.Names {
		if id, err := strconv.ParseInt(k, 10, 64); err == nil {
			out[id] = v
		}
	}
	return out
}

// Parquet is the file sink used when no ClickHouse is configured.
type Parquet struct {
	Dir string `koanf:"dir"`
}

// Files is the copy of respondents' uploaded files into object storage.
type Files struct {
	Enabled            bool     `koanf:"enabled"`
	URL                URL      `koanf:"url"` // file:///abs/dir or s3://bucket?region=… (S3-compatible storage)
	MaxConcurrency     int      `koanf:"max_concurrency"`
	MaxSize            ByteSize `koanf:"max_size"`             // larger files are skipped and counted
	DeleteWithResponse bool     `koanf:"delete_with_response"` // delete a deleted response's objects
	TypeMatch          []string `koanf:"type_match"`           // a question type containing one of these carries files
	S3                 S3Keys   `koanf:"s3"`                   // optional; else the AWS default credential chain
}

// S3Keys are static credentials for s3:// URLs (AWS or an S3-compatible
// server); both keys or neither.
type S3Keys struct {
	AccessKeyID     string `koanf:"access_key_id"`
	SecretAccessKey Secret `koanf:"secret_access_key"`
	SessionToken    Secret `koanf:"session_token"`
}

// Metrics is the Prometheus endpoint (/metrics).
type Metrics struct {
	Listen string `koanf:"listen"` // host:port; empty disables it
	Pprof  bool   `koanf:"pprof"`  // serve /debug/pprof on the same listener (off by default)
}

// Shutdown is the two-phase stop: drain for DrainTimeout, then abandon.
type Shutdown struct {
	DrainTimeout time.Duration `koanf:"drain_timeout"`
}

// HA is high availability: several daemons for one account elect a leader
// on ZooKeeper (or ClickHouse Keeper); only the leader polls, reconciles,
// runs the feeds and copies files, every one receives webhooks
// (docs/operations.md, "High availability"). Off while Servers is empty.
type HA struct {
	Servers        []string      `koanf:"servers"`         // ZooKeeper host:port list; empty: no election
	SessionTimeout time.Duration `koanf:"session_timeout"` // a dead leader is replaced after about this long
	Root           string        `koanf:"root"`            // znode of this account's election; empty: HARoot's default
	Instance       string        `koanf:"instance"`        // this daemon's name in the election; empty: the host name
	// ZooKeeper digest authentication, both or neither: with them every
	// znode of the election is creator-only (docs/operations.md, "High
	// availability"). The password is best given as SURVEYSYNC_HA__PASSWORD.
	Username string `koanf:"username"`
	Password Secret `koanf:"password"`
}

// Enabled reports whether the daemon takes part in a leader election.
func (h HA) Enabled() bool { return len(h.Servers) > 0 }

// HARoot is ha.root, or its default: /surveysync/<sink>-<hash>, where the
// sink is the ClickHouse database (or "parquet") and the hash (16 hex
// digits of SHA-256) is over api.base_url and the sink's identity (the
// ClickHouse database and cluster, or the Parquet directory as configured).
// Daemons of one account share the base URL and the warehouse, so they meet
// under one root without configuring it; the token is not part of it (it
// may be rotated one daemon at a time, and it is a secret).
func (c *Config) HARoot() string {
	if c.HA.Root != "" {
		return c.HA.Root
	}
	name, ident := "parquet", "parquet:"+c.Parquet.Dir
	if len(c.ClickHouse.Addr) > 0 {
		name, ident = c.ClickHouse.Database, "clickhouse:"+c.ClickHouse.Database+"@"+c.ClickHouse.Cluster
	}
	sum := sha256.Sum256([]byte(strings.TrimRight(c.API.BaseURL.Value(), "/") + "\n" + ident))
	return "/surveysync/" + name + "-" + hex.EncodeToString(sum[:8])
}

// Log configures log/slog.
type Log struct {
	Level  string `koanf:"level"`  // debug, info, warn, error
	Format string `koanf:"format"` // text, json
}

// Demo is the self-contained demonstration mode.
type Demo struct {
	Emulator Emulator `koanf:"emulator"`
}

// Emulator starts the built-in emulator of the survey service in-process;
// the daemon then points api.base_url and api.token at it.
type Emulator struct {
	Enabled            bool   `koanf:"enabled"`
	Listen             string `koanf:"listen"`  // host:port; port 0 picks a free one
	Surveys            int    `koanf:"surveys"` // surveys generated
	ResponsesPerSurvey int    `koanf:"responses_per_survey"`
	Seed               int64  `koanf:"seed"`
}

// Feed types.
const (
	FeedCSVDir          = "csv_dir"
	FeedHTTP            = "http"
	FeedClickHouseQuery = "clickhouse_query"
)

// Schedule policies of a feed's send.
const (
	SendImmediate = "immediate"
	SendDelay     = "delay"
	SendWindow    = "window"
)

// DedupeHash is the dedupe_key value that keys a row by a hash of all its
// mapped fields.
const DedupeHash = "hash"

// Feed pushes contacts from a source into a distribution channel and
// optionally triggers a message send.
type Feed struct {
	Name            string            `koanf:"name"`            // unique; [a-z0-9_-], used in metrics and audit rows
	Type            string            `koanf:"type"`            // csv_dir, http, clickhouse_query
	DistributionID  int64             `koanf:"distribution_id"` // the channel receiving the contacts
	Channel         string            `koanf:"channel"`         // optional: email or cati
	Mapping         map[string]string `koanf:"mapping"`         // contact field → source column
	Salutation      Salutation        `koanf:"salutation"`
	DedupeKey       string            `koanf:"dedupe_key"`  // a source column, or "hash" of the mapped fields
	Interval        time.Duration     `koanf:"interval"`    // how often a csv_dir is polled / a query run
	Concurrency     int               `koanf:"concurrency"` // create-contact calls in flight
	CSVDir          CSVDirFeed        `koanf:"csv_dir"`
	HTTP            HTTPFeed          `koanf:"http"`
	ClickHouseQuery QueryFeed         `koanf:"clickhouse_query"`
	Send            Send              `koanf:"send"` // MessageID 0 = no send
}

// Salutation are the salutation flags passed with each contact (docs/api.md §2.1).
type Salutation struct {
	Generate         bool   `koanf:"generate"`
	PrefixMale       string `koanf:"prefix_male"`
	PrefixFemale     string `koanf:"prefix_female"`
	IncludeFirstName bool   `koanf:"include_first_name"`
	IncludeLastName  bool   `koanf:"include_last_name"`
}

// CSVDirFeed reads CSV files dropped into a directory.
type CSVDirFeed struct {
	Dir       string `koanf:"dir"`
	Delimiter string `koanf:"delimiter"` // one character; empty detects "," or ";" from the header
	// MaxRecordBytes caps a CSV record and a JSONL line (default 1MiB): a
	// longer CSV record sends the file to failed/, a longer JSONL line is
	// an invalid row.
	MaxRecordBytes ByteSize `koanf:"max_record_bytes"`
}

// HTTPFeed accepts contacts POSTed to Listen+Path with
// "Authorization: Bearer <token>".
type HTTPFeed struct {
	Listen       string   `koanf:"listen"` // host:port; http feeds may share one
	Path         string   `koanf:"path"`   // default /feeds/<name>
	Token        Secret   `koanf:"token"`
	MaxBodyBytes ByteSize `koanf:"max_body_bytes"`
}

// QueryFeed reads contacts with a query on the configured ClickHouse.
type QueryFeed struct {
	Query string `koanf:"query"`
}

// Send triggers a message of the channel after each pushed batch.
type Send struct {
	MessageID int64    `koanf:"message_id"`
	Schedule  Schedule `koanf:"schedule"`
}

// Schedule says when the send happens: at once, Delay after the batch, or
// at the next opening of Window.
type Schedule struct {
	Policy string        `koanf:"policy"` // immediate, delay, window
	Delay  time.Duration `koanf:"delay"`
	Window Window        `koanf:"window"`
}

// Window is a weekly sending window in a time zone. Use ParseWeekday and
// ParseClock to read Days, From and To.
type Window struct {
	Days     []string `koanf:"days"` // mon … sun
	From     string   `koanf:"from"` // "HH:MM"
	To       string   `koanf:"to"`
	TimeZone string   `koanf:"time_zone"` // IANA name
}

// ContactFields are the contact fields a feed mapping may fill (docs/api.md §2.1),
// as source/feed accepts them.
var ContactFields = []string{
	"import_number", "email", "phone", "first_name", "last_name", "salutation",
	"company", "department", "job", "mobile",
	"user_field1", "user_field2", "user_field3", "user_field4", "user_field5",
	"user_field6", "user_field7", "user_field8", "user_field9", "user_field10",
	// Per-row overrides of the feed's salutation settings.
	"salutation_generate", "salutation_prefix_male", "salutation_prefix_female",
	"salutation_include_first_name", "salutation_include_last_name",
}

// Statuses are the list filters sync.statuses may name (docs/api.md §3).
var Statuses = []string{"completed", "disqualified", "quotafull", "partial"}

// Demo defaults the daemon fills in when the emulator runs.
const (
	DemoUserAgent = "surveysync-demo (demo@example.invalid)"
)

// defaults is the bottom layer of Load: every key's default, before the
// derived values (files.url) and the demo rule are applied.
func defaults() *Config {
	return &Config{
		API: API{
			BaseURL:        "https://api.click4survey.com/v1",
			MaxConcurrency: surveyapi.DefaultMaxConcurrency,
			RateLimit:      10,
			Timeout:        surveyapi.DefaultTimeout,
			MaxRetries:     surveyapi.DefaultMaxRetries,
			QuotaPause:     surveyapi.DefaultQuotaPause,
		},
		Surveys:        []int64{},
		SurveysExclude: []int64{},
		Sync: Sync{
			Statuses:          append([]string(nil), Statuses...),
			PollInterval:      poll.DefaultPollInterval,
			Overlap:           poll.DefaultOverlap,
			SettleLag:         5 * time.Second, // poll's zero is none
			PartialLookback:   poll.DefaultPartialLookback,
			PartialRescan:     poll.DefaultPartialRescanInterval,
			ReconcileInterval: poll.DefaultReconcileInterval,
			BackfillFrom:      poll.DefaultBackfillFrom(),
			FetchConcurrency:  pipeline.DefaultFetchConcurrency,
			Batch: Batch{
				MaxRows:  pipeline.DefaultMaxRows,
				MaxBytes: pipeline.DefaultMaxBytes,
				MaxDelay: pipeline.DefaultMaxDelay,
			},
		},
		Webhooks: Webhooks{
			Listen:             "127.0.0.1:8088",
			SpoolDir:           "./data/webhook-spool",
			SpoolMaxEvents:     webhookrx.DefaultSpoolMaxEvents,
			SpoolMaxBytes:      ByteSize(webhookrx.DefaultSpoolMaxBytes),
			AllowCIDRs:         []string{},
			SignatureTolerance: webhookrx.DefaultSignatureTolerance,
			MaxBodyBytes:       ByteSize(webhookrx.DefaultMaxBodyBytes),
		},
		ClickHouse: ClickHouse{
			Addr:            []string{},
			Database:        "surveysync",
			Username:        "default",
			DialTimeout:     10 * time.Second,
			Replicated:      true,
			ZooKeeperPrefix: "/clickhouse/tables",
			DDLTimeout:      60 * time.Second,
		},
		Parquet: Parquet{Dir: "./data"},
		Files: Files{
			Enabled:        true,
			MaxConcurrency: 4,
			MaxSize:        1 << 30,
			TypeMatch:      files.DefaultTypeMatch(),
		},
		Metrics:  Metrics{Listen: "127.0.0.1:9464"},
		Shutdown: Shutdown{DrainTimeout: 30 * time.Second},
		HA:       HA{Servers: []string{}, SessionTimeout: ha.DefaultSessionTimeout},
		Log:      Log{Level: "info", Format: "text"},
		Demo: Demo{Emulator: Emulator{
			Listen:             "127.0.0.1:0",
			Surveys:            3,
			ResponsesPerSurvey: 1000,
			Seed:               1,
		}},
		Feeds: []Feed{},
		Wide:  Wide{Names: map[string]string{}},
		Verify: Verify{
			Interval: DefaultVerifyInterval,
			Sample:   DefaultVerifySample,
			Repair:   true,
		},
		Privacy: Privacy{
			Fields: PrivacyFields{
				IPAddress:      ActionKeep,
				ContactID:      ActionKeep,
				DistributionID: ActionKeep,
				URLParameters:  map[string]string{},
			},
			Questions: []QuestionRule{},
		},
	}
}

// Default returns the configuration surveysync runs with when it is given
// no file, no SURVEYSYNC_* variable and no flag: the demo, with the
// in-process emulator enabled, Parquet files under ./data and uploaded files
// under ./data/files. It is what Load("", nil, nil) returns, and it is
// valid.
func Default() *Config {
	c := defaults()
	c.Demo.Emulator.Enabled = true
	c.resolve()
	return c
}

// resolve fills the values derived from others: per-feed defaults, the
// default files.url under parquet.dir, and the demo User-Agent.
func (c *Config) resolve() {
	if c.Files.URL == "" {
		c.Files.URL = URL(fileURL(filepath.Join(c.Parquet.Dir, "files")))
	}
	if c.API.UserAgent == "" && c.Demo.Emulator.Enabled {
		c.API.UserAgent = DemoUserAgent
	}
	for i := range c.Feeds {
		c.Feeds[i].setDefaults()
	}
}

// DefaultFeedListen is feeds[].http.listen's default (the feed package
// takes a listener, not an address). The other per-feed defaults are
// source/feed's.
const DefaultFeedListen = "127.0.0.1:8090"

// setDefaults fills a feed's unset keys after decoding.
func (f *Feed) setDefaults() {
	if f.DedupeKey == "" {
		f.DedupeKey = DedupeHash
	}
	if f.Concurrency == 0 {
		f.Concurrency = feed.DefaultConcurrency
	}
	switch f.Type {
	case FeedCSVDir:
		if f.Interval == 0 {
			f.Interval = feed.DefaultCSVDirInterval
		}
		if f.CSVDir.MaxRecordBytes == 0 {
			f.CSVDir.MaxRecordBytes = feed.DefaultMaxRecordBytes
		}
	case FeedClickHouseQuery:
		if f.Interval == 0 {
			f.Interval = feed.DefaultQueryInterval
		}
	case FeedHTTP:
		if f.HTTP.MaxBodyBytes == 0 {
			f.HTTP.MaxBodyBytes = feed.DefaultMaxBodyBytes
		}
		if f.HTTP.Listen == "" {
			f.HTTP.Listen = DefaultFeedListen
		}
		if f.HTTP.Path == "" && f.Name != "" {
			f.HTTP.Path = "/feeds/" + f.Name
		}
	}
	if f.Mapping == nil {
		f.Mapping = map[string]string{}
	}
	s := &f.Send.Schedule
	if s.Policy == "" {
		s.Policy = SendImmediate
	}
	if s.Policy == SendWindow {
		if len(s.Window.Days) == 0 {
			s.Window.Days = []string{"mon", "tue", "wed", "thu", "fri"}
		}
		if s.Window.From == "" {
			s.Window.From = "09:00"
		}
		if s.Window.To == "" {
			s.Window.To = "17:00"
		}
		if s.Window.TimeZone == "" {
			s.Window.TimeZone = "Europe/Prague"
		}
	}
}

// fileURL turns a directory into an absolute file:// URL.
func fileURL(dir string) string {
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = dir
	}
	return "file://" + filepath.ToSlash(abs)
}
