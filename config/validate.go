package config

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	_ "time/tzdata" // send windows name IANA zones; do not depend on the host's tzdata

	"github.com/surveysync/surveysync/webhookrx"
	"github.com/surveysync/surveysync/wide"
)

// problem is one validation finding: a key path and what is wrong with it.
type problem struct {
	path, msg string
}

func (p problem) Error() string { return p.path + " " + p.msg }

// locate adds where the key (or the list element holding it) was set, when
// a file, variable or flag set it: "… [surveysync.yaml:12]".
func (p problem) locate(sources map[string]string) error {
	for key := p.path; key != ""; {
		if where, ok := sources[key]; ok {
			return fmt.Errorf("%s [%s]", p.Error(), where)
		}
		// Up one level, but only to the enclosing list item or list
		// ("feeds[2].send.delay" → "feeds[2]"; "sync.statuses[1]" →
		// "sync.statuses"): a section's line says little about a key
		// the file did not set.
		if i := strings.LastIndexByte(key, '['); i > 0 && strings.HasSuffix(key, "]") {
			key = key[:i]
		} else if j := strings.LastIndexByte(key, ']'); j > 0 && j+1 < len(key) {
			key = key[:j+1]
		} else {
			break
		}
	}
	return p
}

// problems collects validation findings.
type problems []problem

func (p *problems) add(path, format string, args ...any) {
	*p = append(*p, problem{path: path, msg: fmt.Sprintf(format, args...)})
}

// Validate checks the whole configuration and returns every problem found,
// joined (errors.Join), each naming the key path and why; nil when the
// configuration is usable. Secret values never appear in the messages.
func (c *Config) Validate() error {
	probs := c.problems()
	errs := make([]error, len(probs))
	for i, p := range probs {
		errs[i] = p
	}
	return errors.Join(errs...)
}

func (c *Config) problems() problems {
	var p problems
	c.validateAPI(&p)
	c.validateSync(&p)
	c.validateWebhooks(&p)
	c.validateClickHouse(&p)
	c.validateFiles(&p)
	c.validateMisc(&p)
	c.validateFeeds(&p)
	c.validatePrivacy(&p)
	c.validateListeners(&p)
	c.validateHA(&p)
	return p
}

var userAgentRe = regexp.MustCompile(`^[^\s()]+(?: [^\s()]+)* \([^\s()@]+@[^\s()@]+\.[^\s()@]+\)$`)

func (c *Config) validateAPI(p *problems) {
	a := &c.API
	if u, err := url.Parse(a.BaseURL.Value()); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		p.add("api.base_url", "must be an http or https URL (got %q)", a.BaseURL.String())
	} else if !strings.HasSuffix(strings.TrimSuffix(u.Path, "/"), "/v1") {
		p.add("api.base_url", "must end in /v1 (got %q)", a.BaseURL.String())
	}
	if !a.Token.IsSet() && !c.Demo.Emulator.Enabled {
		p.add("api.token", "is required (set it in the file or in SURVEYSYNC_API__TOKEN), unless demo.emulator.enabled is true")
	}
	if a.UserAgent == "" {
		p.add("api.user_agent", `is required: "<app_name> (<contact_email>)", e.g. "acme-surveysync (data@acme.example)"`)
	} else if !userAgentRe.MatchString(a.UserAgent) {
		p.add("api.user_agent", `must look like "<app_name> (<contact_email>)", e.g. "acme-surveysync (data@acme.example)" (got %q)`, a.UserAgent)
	}
	intRange(p, "api.max_concurrency", a.MaxConcurrency, 1, 1024)
	if !(a.RateLimit >= 0) {
		p.add("api.rate_limit", "must be a number of requests per second, or 0 for no limit (got %g)", a.RateLimit)
	}
	positive(p, "api.timeout", a.Timeout)
	intRange(p, "api.max_retries", a.MaxRetries, 0, 100)
	positive(p, "api.quota_pause", a.QuotaPause)
	if a.MonthlyBudget < 0 {
		p.add("api.monthly_budget", "must be a number of API calls per month, or 0 for unlimited (got %d)", a.MonthlyBudget)
	}
	seen := map[int64]bool{}
	for i, id := range c.Surveys {
		if id <= 0 {
			p.add(fmt.Sprintf("surveys[%d]", i), "must be a positive survey id (got %d)", id)
		}
		if seen[id] {
			p.add(fmt.Sprintf("surveys[%d]", i), "repeats survey %d", id)
		}
		seen[id] = true
	}
	excluded := map[int64]bool{}
	for i, id := range c.SurveysExclude {
		key := fmt.Sprintf("surveys_exclude[%d]", i)
		switch {
		case id <= 0:
			p.add(key, "must be a positive survey id (got %d)", id)
		case seen[id]:
			p.add(key, "survey %d is in surveys too: remove it from one of the two", id)
		case excluded[id]:
			p.add(key, "repeats survey %d", id)
		}
		excluded[id] = true
	}
}

func (c *Config) validateSync(p *problems) {
	s := &c.Sync
	if len(s.Statuses) == 0 {
		p.add("sync.statuses", "must name at least one of %s", strings.Join(Statuses, ", "))
	}
	seen := map[string]bool{}
	for i, st := range s.Statuses {
		path := fmt.Sprintf("sync.statuses[%d]", i)
		if !slices.Contains(Statuses, st) {
			p.add(path, "must be one of %s (got %q)", strings.Join(Statuses, ", "), st)
		} else if seen[st] {
			p.add(path, "repeats %q", st)
		}
		seen[st] = true
	}
	if s.PollInterval < time.Second {
		p.add("sync.poll_interval", "must be at least 1s (got %s)", FormatDuration(s.PollInterval))
	}
	nonNegative(p, "sync.overlap", s.Overlap)
	nonNegative(p, "sync.settle_lag", s.SettleLag)
	positive(p, "sync.partial_rescan_interval", s.PartialRescan)
	if seen["partial"] && s.PartialLookback < s.PollInterval {
		p.add("sync.partial_lookback", "(%s) must be at least sync.poll_interval (%s), or partial responses can be missed between polls",
			FormatDuration(s.PartialLookback), FormatDuration(s.PollInterval))
	}
	if s.ReconcileInterval < 0 {
		p.add("sync.reconcile_interval", "must be positive, or 0 to disable the reconcile pass (got %s)", FormatDuration(s.ReconcileInterval))
	} else if s.ReconcileInterval > 0 && s.ReconcileInterval < s.PollInterval {
		p.add("sync.reconcile_interval", "(%s) must be at least sync.poll_interval (%s): it re-lists every id of a survey",
			FormatDuration(s.ReconcileInterval), FormatDuration(s.PollInterval))
	}
	if s.BackfillFrom.IsZero() {
		p.add("sync.backfill_from", "is required (e.g. 2000-01-01 for everything)")
	} else if s.BackfillFrom.After(time.Now()) {
		p.add("sync.backfill_from", "is in the future (%s)", formatDate(s.BackfillFrom))
	}
	intRange(p, "sync.fetch_concurrency", s.FetchConcurrency, 1, 1024)
	intRange(p, "sync.batch.max_rows", s.Batch.MaxRows, 1, 100_000_000)
	if s.Batch.MaxBytes < 1<<10 {
		p.add("sync.batch.max_bytes", "must be at least 1KiB (got %s)", s.Batch.MaxBytes)
	}
	positive(p, "sync.batch.max_delay", s.Batch.MaxDelay)
	if s.Batch.MaxDelay > 0 && c.Shutdown.DrainTimeout > 0 && s.Batch.MaxDelay >= c.Shutdown.DrainTimeout {
		p.add("sync.batch.max_delay", "(%s) must be shorter than shutdown.drain_timeout (%s), or a shutdown cannot flush the last batch",
			FormatDuration(s.Batch.MaxDelay), FormatDuration(c.Shutdown.DrainTimeout))
	}
}

var pathSecretRe = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

func (c *Config) validateWebhooks(p *problems) {
	w := &c.Webhooks
	if !w.Enabled {
		return
	}
	listenAddr(p, "webhooks.listen", w.Listen)
	path := w.Path.Value()
	switch {
	case !strings.HasPrefix(path, "/"):
		p.add("webhooks.path", "must start with / (got %q)", w.Path.String())
	default:
		ok := false
		for _, seg := range strings.Split(path, "/") {
			if len(seg) >= MinPathSecret && pathSecretRe.MatchString(seg) {
				ok = true
			}
		}
		if strings.Contains(strings.ToLower(path), "change-me") {
			p.add("webhooks.path", "still holds the example's placeholder: replace it with a random secret (e.g. `openssl rand -hex 16`)")
		} else if !ok {
			p.add("webhooks.path", "must contain a secret segment of at least %d characters [A-Za-z0-9_-] (e.g. /hooks/<output of `openssl rand -hex 16`>): the service signs nothing, the path is the password (got %q)",
				MinPathSecret, w.Path.String())
		}
	}
	if w.SpoolDir == "" {
		p.add("webhooks.spool_dir", "is required when webhooks are enabled")
	}
	intRange(p, "webhooks.spool_max_events", w.SpoolMaxEvents, 1, 1<<40)
	if w.SpoolMaxBytes < 1<<20 {
		p.add("webhooks.spool_max_bytes", "must be at least 1MiB (got %s)", w.SpoolMaxBytes)
	}
	if (w.BasicAuth.Username == "") != !w.BasicAuth.Password.IsSet() {
		p.add("webhooks.basic_auth", "needs both username and password, or neither")
	}
	for i, cidr := range w.AllowCIDRs {
		if _, err := parsePrefix(cidr); err != nil {
			p.add(fmt.Sprintf("webhooks.allow_cidrs[%d]", i), "must be a CIDR such as 203.0.113.0/24 or an IP address (got %q)", cidr)
		}
	}
	if sec := w.StandardWebhooksSecret.Value(); sec != "" {
		if b64, ok := strings.CutPrefix(sec, "whsec_"); ok {
			if b, err := base64.StdEncoding.DecodeString(b64); err != nil || len(b) == 0 {
				p.add("webhooks.standard_webhooks_secret", `starts with "whsec_" but the rest is not base64 (value hidden)`)
			} else if len(b) < webhookrx.MinSecretBytes {
				p.add("webhooks.standard_webhooks_secret", "must be a key of at least %[2]d bytes (this one decodes to %[1]d; value hidden): use the sender's whsec_ secret, or a random key such as the output of `openssl rand -hex 24`", len(b), webhookrx.MinSecretBytes)
			}
		} else if len(sec) < webhookrx.MinSecretBytes {
			p.add("webhooks.standard_webhooks_secret", "must be a key of at least %[2]d bytes (this raw key has %[1]d; value hidden): use the sender's whsec_ secret, or a random key such as the output of `openssl rand -hex 24`", len(sec), webhookrx.MinSecretBytes)
		}
	}
	if w.SignatureRequired() && !w.StandardWebhooksSecret.IsSet() {
		p.add("webhooks.require_signature", "needs webhooks.standard_webhooks_secret")
	}
	positive(p, "webhooks.signature_tolerance", w.SignatureTolerance)
	if w.MaxBodyBytes < 1<<10 || w.MaxBodyBytes > 64<<20 {
		p.add("webhooks.max_body_bytes", "must be between 1KiB and 64MiB (got %s)", w.MaxBodyBytes)
	}
}

func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		return netip.ParsePrefix(s)
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

var identRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func (c *Config) validateClickHouse(p *problems) {
	ch := &c.ClickHouse
	for i, a := range ch.Addr {
		hostPort(p, fmt.Sprintf("clickhouse.addr[%d]", i), a)
	}
	if !identRe.MatchString(ch.Database) {
		p.add("clickhouse.database", "must be a plain identifier [A-Za-z_][A-Za-z0-9_]* (got %q)", ch.Database)
	}
	if ch.Username == "" {
		p.add("clickhouse.username", "is required (ClickHouse's own default user is \"default\")")
	}
	if ch.Cluster != "" && !identRe.MatchString(ch.Cluster) {
		p.add("clickhouse.cluster", "must be a plain identifier or empty (got %q)", ch.Cluster)
	}
	positive(p, "clickhouse.dial_timeout", ch.DialTimeout)
	positive(p, "clickhouse.ddl_timeout", ch.DDLTimeout)
	if ch.InsertQuorum < 0 || ch.InsertQuorum > 16 {
		p.add("clickhouse.insert_quorum", "must be 0 (off) or the number of replicas of each shard that must have an insert, at most 16 (got %d)", ch.InsertQuorum)
	}
	if !zkPathRe.MatchString(ch.ZooKeeperPrefix) {
		p.add("clickhouse.zookeeper_prefix", "must be an absolute ZooKeeper path of letters, digits, _ . - / and {macros} (got %q)", ch.ZooKeeperPrefix)
	}
}

var zkPathRe = regexp.MustCompile(`^/[A-Za-z0-9_./{}-]*$`)

// FileSchemes are the object stores files.url may name: a local folder and
// S3-compatible storage (sink/blob; docs/files.md).
var FileSchemes = []string{"file", "s3"}

// otherStore names an object store surveysync does not talk to directly,
// by files.url scheme or by the files.<key> section earlier examples
// offered for it.
func otherStore(s string) (string, bool) {
	switch s {
	case "gs", "gcs":
		return "Google Cloud Storage", true
	case "azblob", "azure":
		return "Azure Blob Storage", true
	}
	return "", false
}

// unsupportedStore explains that what is not supported, what is, and the
// way around: an S3-compatible endpoint or gateway.
func unsupportedStore(what string) string {
	return what + " is not supported: uploaded files go to a local folder (files.url: file:///abs/dir) or to S3-compatible storage " +
		"(files.url: s3://bucket?region=…, credentials in files.s3); put an S3-compatible gateway in front of other stores " +
		"(Google Cloud Storage's own S3-compatible XML API, or versitygw's azure backend for Azure Blob Storage) and point files.url at it; see docs/files.md"
}

// unsupportedStoreKey is the explanation for key when it is (or is under)
// a files.<store> section of a store that is not supported.
func unsupportedStoreKey(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, "files.")
	if !ok {
		return "", false
	}
	section, _, _ := strings.Cut(rest, ".")
	name, ok := otherStore(section)
	if !ok {
		return "", false
	}
	return unsupportedStore(name + " (files." + section + ")"), true
}

func (c *Config) validateFiles(p *problems) {
	f := &c.Files
	if !f.Enabled {
		return
	}
	u, err := url.Parse(f.URL.Value())
	switch {
	case err != nil || u.Scheme == "":
		p.add("files.url", "must be a URL such as file:///var/lib/surveysync/files or s3://bucket?region=eu-central-1 (got %q)", f.URL.String())
	case !slices.Contains(FileSchemes, u.Scheme):
		what := fmt.Sprintf("scheme %q", u.Scheme)
		if name, ok := otherStore(u.Scheme); ok {
			what = fmt.Sprintf("%s (%s://)", name, u.Scheme)
		}
		p.add("files.url", "%s", unsupportedStore(what))
	case u.Scheme == "file" && (u.Host != "" && u.Host != "localhost" || !strings.HasPrefix(u.Path, "/")):
		p.add("files.url", "must name an absolute directory: file:///path (got %q)", f.URL.String())
	case u.Scheme != "file" && u.Host == "":
		p.add("files.url", "must name a bucket or container: %s://<name>… (got %q)", u.Scheme, f.URL.String())
	}
	intRange(p, "files.max_concurrency", f.MaxConcurrency, 1, 256)
	if f.MaxSize <= 0 {
		p.add("files.max_size", "must be positive (got %s)", f.MaxSize)
	}
	if len(f.TypeMatch) == 0 {
		p.add("files.type_match", "must name at least one question type fragment (default [file, upload])")
	}
	for i, m := range f.TypeMatch {
		if strings.TrimSpace(m) == "" {
			p.add(fmt.Sprintf("files.type_match[%d]", i), "must not be empty")
		}
	}
	if (f.S3.AccessKeyID == "") != !f.S3.SecretAccessKey.IsSet() {
		p.add("files.s3", "needs both access_key_id and secret_access_key, or neither")
	}
	if (f.S3.AccessKeyID != "" || f.S3.SessionToken.IsSet()) && u != nil && u.Scheme != "s3" {
		p.add("files.s3", "is set but files.url is not an s3:// URL")
	}
}

func (c *Config) validateMisc(p *problems) {
	if c.Parquet.Dir == "" {
		p.add("parquet.dir", "is required (the Parquet sink, the state of a ClickHouse-less run)")
	}
	if c.Metrics.Listen != "" {
		listenAddr(p, "metrics.listen", c.Metrics.Listen)
	}
	positive(p, "shutdown.drain_timeout", c.Shutdown.DrainTimeout)
	if !slices.Contains([]string{"debug", "info", "warn", "error"}, c.Log.Level) {
		p.add("log.level", "must be one of debug, info, warn, error (got %q)", c.Log.Level)
	}
	if !slices.Contains([]string{"text", "json"}, c.Log.Format) {
		p.add("log.format", "must be text or json (got %q)", c.Log.Format)
	}
	seen := map[string]string{}
	for k, name := range c.Wide.Names {
		if _, err := strconv.ParseInt(k, 10, 64); err != nil {
			p.add("wide.names."+k, "must be keyed by a survey id (got %q)", k)
		}
		if err := wide.CheckViewName(name); err != nil {
			p.add("wide.names."+k, "%v", err)
		}
		if other, ok := seen[name]; ok {
			p.add("wide.names."+k, "%q is already survey %s's view name", name, other)
		}
		seen[name] = k
	}
	c.validateVerify(p)
	e := &c.Demo.Emulator
	if e.Enabled {
		listenAddr(p, "demo.emulator.listen", e.Listen)
		intRange(p, "demo.emulator.surveys", e.Surveys, 1, 1000)
		intRange(p, "demo.emulator.responses_per_survey", e.ResponsesPerSurvey, 0, 10_000_000)
	}
}

// validateVerify checks verify.*: a pass lists each stream once, so it may
// not come more often than the streams are polled.
func (c *Config) validateVerify(p *problems) {
	v := c.Verify
	switch {
	case v.Interval < 0:
		p.add("verify.interval", "must be positive, or 0 to disable the daemon's verification (got %s)", FormatDuration(v.Interval))
	case v.Interval > 0 && v.Interval < c.Sync.PollInterval:
		p.add("verify.interval", "(%s) must be at least sync.poll_interval (%s): a difference is checked again a poll interval later before it counts",
			FormatDuration(v.Interval), FormatDuration(c.Sync.PollInterval))
	}
	intRange(p, "verify.sample", v.Sample, 0, MaxVerifySample)
}

// MaxVerifySample bounds verify.sample: each sampled response costs one
// detail call per survey per pass.
const MaxVerifySample = 10_000

var feedNameRe = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// FeedTypes are the values feeds[].type may take.
var FeedTypes = []string{FeedCSVDir, FeedHTTP, FeedClickHouseQuery}

func (c *Config) validateFeeds(p *problems) {
	names := map[string]int{}
	httpRoutes := map[string]int{}
	for i := range c.Feeds {
		f := &c.Feeds[i]
		at := func(key string) string { return fmt.Sprintf("feeds[%d].%s", i, key) }
		if f.Name == "" {
			p.add(at("name"), "is required")
		} else if !feedNameRe.MatchString(f.Name) {
			p.add(at("name"), "must be lower-case letters, digits, '-' or '_' (it appears in metrics and audit rows) (got %q)", f.Name)
		} else if j, dup := names[f.Name]; dup {
			p.add(at("name"), "%q is also the name of feeds[%d]", f.Name, j)
		} else {
			names[f.Name] = i
		}
		if f.DistributionID <= 0 {
			p.add(at("distribution_id"), "is required (the id of the email or CATI distribution receiving the contacts)")
		}
		if f.Channel != "" && f.Channel != "email" && f.Channel != "cati" {
			p.add(at("channel"), "must be email, cati or empty (got %q)", f.Channel)
		}
		c.validateMapping(p, i, f)
		if strings.TrimSpace(f.DedupeKey) == "" {
			p.add(at("dedupe_key"), "must be a source column or %q", DedupeHash)
		}
		if (f.Type == FeedCSVDir || f.Type == FeedClickHouseQuery) && f.Interval < time.Second {
			p.add(at("interval"), "must be at least 1s (got %s)", FormatDuration(f.Interval))
		}
		intRange(p, at("concurrency"), f.Concurrency, 1, 256)
		switch f.Type {
		case FeedCSVDir:
			if f.CSVDir.Dir == "" {
				p.add(at("csv_dir.dir"), "is required for a csv_dir feed")
			}
			if d := f.CSVDir.Delimiter; d != "" && (len([]rune(d)) != 1 || d == "\"" || d == "\n" || d == "\r") {
				p.add(at("csv_dir.delimiter"), "must be one character other than a quote or a line break, or empty to detect it (got %q)", d)
			}
			if r := f.CSVDir.MaxRecordBytes; r < 1<<10 || r > 1<<30 {
				p.add(at("csv_dir.max_record_bytes"), "must be between 1KiB and 1GiB (got %s)", r)
			}
		case FeedHTTP:
			listenAddr(p, at("http.listen"), f.HTTP.Listen)
			if !strings.HasPrefix(f.HTTP.Path, "/") {
				p.add(at("http.path"), "must start with / (got %q)", f.HTTP.Path)
			}
			if !f.HTTP.Token.IsSet() {
				p.add(at("http.token"), "is required for an http feed (pushers send Authorization: Bearer <token>)")
			} else if len(f.HTTP.Token.Value()) < 16 {
				p.add(at("http.token"), "must be at least 16 characters (value hidden)")
			}
			if f.HTTP.MaxBodyBytes < 1<<10 {
				p.add(at("http.max_body_bytes"), "must be at least 1KiB (got %s)", f.HTTP.MaxBodyBytes)
			}
			route := f.HTTP.Listen + f.HTTP.Path
			if j, dup := httpRoutes[route]; dup {
				p.add(at("http.path"), "%s on %s is also used by feeds[%d]", f.HTTP.Path, f.HTTP.Listen, j)
			} else {
				httpRoutes[route] = i
			}
		case FeedClickHouseQuery:
			if strings.TrimSpace(f.ClickHouseQuery.Query) == "" {
				p.add(at("clickhouse_query.query"), "is required for a clickhouse_query feed")
			}
			if len(c.ClickHouse.Addr) == 0 {
				p.add(at("type"), "clickhouse_query needs clickhouse.addr")
			}
		case "":
			p.add(at("type"), "is required: one of %s", strings.Join(FeedTypes, ", "))
		default:
			p.add(at("type"), "must be one of %s (got %q)", strings.Join(FeedTypes, ", "), f.Type)
		}
		validateSend(p, i, f)
	}
}

func (c *Config) validateMapping(p *problems, i int, f *Feed) {
	at := func(key string) string { return fmt.Sprintf("feeds[%d].%s", i, key) }
	if len(f.Mapping) == 0 {
		p.add(at("mapping"), "is required: contact field → source column, e.g. {email: E-mail}")
	}
	for _, field := range sortedStrings(f.Mapping) {
		if !slices.Contains(ContactFields, field) {
			msg := "is not a contact field; the fields are " + strings.Join(ContactFields, ", ")
			if s := Suggest(field, ContactFields); s != "" {
				msg = fmt.Sprintf("is not a contact field (did you mean %s?)", s)
			}
			p.add(at("mapping."+field), "%s", msg)
		} else if strings.TrimSpace(f.Mapping[field]) == "" {
			p.add(at("mapping."+field), "must name a source column")
		}
	}
	has := func(field string) bool { _, ok := f.Mapping[field]; return ok }
	switch f.Channel {
	case "email":
		if !has("email") {
			p.add(at("mapping"), "must map email for an email channel")
		}
	case "cati":
		if !has("phone") && !has("mobile") {
			p.add(at("mapping"), "must map phone or mobile for a cati channel")
		}
	default:
		if len(f.Mapping) > 0 && !has("email") && !has("phone") && !has("mobile") {
			p.add(at("mapping"), "must map email, phone or mobile")
		}
	}
	if f.Salutation.Generate && (!has("first_name") || !has("last_name")) {
		p.add(at("salutation.generate"), "needs first_name and last_name in the mapping (the service requires them to generate a salutation)")
	}
}

func validateSend(p *problems, i int, f *Feed) {
	at := func(key string) string { return fmt.Sprintf("feeds[%d].send.%s", i, key) }
	s := &f.Send
	if s.MessageID < 0 {
		p.add(at("message_id"), "must be a positive message id, or 0 for no send (got %d)", s.MessageID)
	}
	if s.MessageID == 0 {
		return
	}
	if f.Channel == "cati" {
		p.add(at("message_id"), "is set but messages exist only in email channels (channel is cati)")
	}
	switch s.Schedule.Policy {
	case SendImmediate:
	case SendDelay:
		if s.Schedule.Delay <= 0 {
			p.add(at("schedule.delay"), "must be positive for policy delay (got %s)", FormatDuration(s.Schedule.Delay))
		}
	case SendWindow:
		w := &s.Schedule.Window
		if len(w.Days) == 0 {
			p.add(at("schedule.window.days"), "must name at least one day")
		}
		for j, d := range w.Days {
			if _, err := ParseWeekday(d); err != nil {
				p.add(fmt.Sprintf("%s[%d]", at("schedule.window.days"), j), "%v", err)
			}
		}
		from, err1 := ParseClock(w.From)
		if err1 != nil {
			p.add(at("schedule.window.from"), "%v", err1)
		}
		to, err2 := ParseClock(w.To)
		if err2 != nil {
			p.add(at("schedule.window.to"), "%v", err2)
		}
		if err1 == nil && err2 == nil && from >= to {
			p.add(at("schedule.window"), "from (%s) must be before to (%s)", w.From, w.To)
		}
		if _, err := time.LoadLocation(w.TimeZone); err != nil || w.TimeZone == "" {
			p.add(at("schedule.window.time_zone"), "must be an IANA time zone such as Europe/Prague (got %q)", w.TimeZone)
		}
	default:
		p.add(at("schedule.policy"), "must be one of immediate, delay, window (got %q)", s.Schedule.Policy)
	}
}

// validateListeners reports two servers told to listen on one address
// (http feeds may share one among themselves).
func (c *Config) validateListeners(p *problems) {
	owner := map[string]string{}
	claim := func(path, addr string) {
		if addr == "" || strings.HasSuffix(addr, ":0") {
			return
		}
		if prev, ok := owner[addr]; ok {
			p.add(path, "(%s) is also %s", addr, prev)
			return
		}
		owner[addr] = path
	}
	if c.Webhooks.Enabled {
		claim("webhooks.listen", c.Webhooks.Listen)
	}
	claim("metrics.listen", c.Metrics.Listen)
	if c.Demo.Emulator.Enabled {
		claim("demo.emulator.listen", c.Demo.Emulator.Listen)
	}
	feedAddrs := map[string]bool{}
	for i, f := range c.Feeds {
		if f.Type == FeedHTTP && !feedAddrs[f.HTTP.Listen] {
			feedAddrs[f.HTTP.Listen] = true
			claim(fmt.Sprintf("feeds[%d].http.listen", i), f.HTTP.Listen)
		}
	}
}

func positive(p *problems, path string, d time.Duration) {
	if d <= 0 {
		p.add(path, "must be positive (got %s)", FormatDuration(d))
	}
}

func nonNegative(p *problems, path string, d time.Duration) {
	if d < 0 {
		p.add(path, "must not be negative (got %s)", FormatDuration(d))
	}
}

func intRange(p *problems, path string, n, lo, hi int) {
	if n < lo || n > hi {
		p.add(path, "must be between %d and %d (got %d)", lo, hi, n)
	}
}

// listenAddr checks a host:port to listen on (port 0 picks a free one).
func listenAddr(p *problems, path, addr string) {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		p.add(path, "must be host:port, e.g. 127.0.0.1:8088 or :8088 (got %q)", addr)
		return
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		p.add(path, "has an invalid port %q (want 0 to 65535)", port)
	}
}

// hostPort checks a host:port to connect to.
func hostPort(p *problems, path, addr string) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		p.add(path, "must be host:port, e.g. clickhouse.internal:9000 (got %q)", addr)
		return
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		p.add(path, "has an invalid port %q (want 1 to 65535)", port)
	}
}

func sortedStrings(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

var haRootRe = regexp.MustCompile(`^(/[A-Za-z0-9_.-]+)+$`)

func (c *Config) validateHA(p *problems) {
	h := &c.HA
	for i, a := range h.Servers {
		hostPort(p, fmt.Sprintf("ha.servers[%d]", i), a)
	}
	if h.SessionTimeout < time.Second || h.SessionTimeout > 5*time.Minute {
		p.add("ha.session_timeout", "must be between 1s and 5m (got %s; ZooKeeper grants 2 to 20 of its ticks, 4s to 40s by default)", FormatDuration(h.SessionTimeout))
	}
	if h.Root != "" && (!haRootRe.MatchString(h.Root) || slices.Contains(strings.Split(h.Root, "/"), "zookeeper")) {
		p.add("ha.root", "must be an absolute znode path of letters, digits, _ . - such as /surveysync/acme, outside /zookeeper (got %q)", h.Root)
	}
	if len(h.Instance) > 200 || strings.ContainsFunc(h.Instance, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		p.add("ha.instance", "must be at most 200 printable characters (got %q)", h.Instance)
	}
	switch {
	case h.Username == "" && h.Password.IsSet():
		p.add("ha.username", "is empty while ha.password is set: ZooKeeper digest authentication needs both (or neither)")
	case h.Username != "" && !h.Password.IsSet():
		p.add("ha.password", "is empty while ha.username is set (%q): set it, best as SURVEYSYNC_HA__PASSWORD, or remove ha.username", h.Username)
	case strings.Contains(h.Username, ":") || len(h.Username) > 200 || strings.ContainsFunc(h.Username, func(r rune) bool { return r <= ' ' || r == 0x7f }):
		p.add("ha.username", "must be at most 200 printable characters without ':' or spaces (got %q)", h.Username)
	}
	if h.Enabled() && c.Demo.Emulator.Enabled {
		p.add("ha.servers", "is set with demo.emulator.enabled: each daemon would sync its own emulator; point api.base_url at one service instead")
	}
}
