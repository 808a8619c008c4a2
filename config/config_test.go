package config

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

var update = flag.Bool("update", false, "rewrite the golden .err files in testdata/bad")

func TestDefaultIsValidAndIsWhatLoadGivesWithNothing(t *testing.T) {
	d := Default()
	if err := d.Validate(); err != nil {
		t.Fatalf("Default() is invalid:\n%v", err)
	}
	if !d.Demo.Emulator.Enabled {
		t.Error("Default() must run the demo emulator")
	}
	got, err := Load("", nil, nil)
	if err != nil {
		t.Fatalf("Load with nothing: %v", err)
	}
	if diff := cmp.Diff(d, got); diff != "" {
		t.Errorf("Load(\"\", nil, nil) differs from Default() (-want +got):\n%s", diff)
	}
	if got.API.BaseURL != "https://api.click4survey.com/v1" || got.Sync.Batch.MaxBytes != 64<<20 ||
		got.Sync.PollInterval != 30*time.Second || got.ClickHouse.Database != "surveysync" {
		t.Errorf("unexpected defaults: %+v", got)
	}
	wantURL := fileURL(filepath.Join("data", "files"))
	if got.Files.URL.Value() != wantURL {
		t.Errorf("files.url = %q, want %q", got.Files.URL.Value(), wantURL)
	}
}

func TestDemoRule(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
		want bool
	}{
		{"nothing", nil, true},
		{"token given", []string{"SURVEYSYNC_API__TOKEN=t", "SURVEYSYNC_API__USER_AGENT=a (b@c.de)"}, false},
		{"base url given", []string{"SURVEYSYNC_API__BASE_URL=http://127.0.0.1:1/v1", "SURVEYSYNC_API__USER_AGENT=a (b@c.de)", "SURVEYSYNC_API__TOKEN=t"}, false},
		{"explicitly off", []string{"SURVEYSYNC_DEMO__EMULATOR__ENABLED=false", "SURVEYSYNC_API__TOKEN=t", "SURVEYSYNC_API__USER_AGENT=a (b@c.de)"}, false},
		{"other keys only", []string{"SURVEYSYNC_CLICKHOUSE__ADDR=127.0.0.1:9000"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load("", tc.env, nil)
			if err != nil {
				t.Fatal(err)
			}
			if c.Demo.Emulator.Enabled != tc.want {
				t.Errorf("demo.emulator.enabled = %v, want %v", c.Demo.Emulator.Enabled, tc.want)
			}
		})
	}
	// With a file, the demo is never turned on by itself.
	if _, err := Load("testdata/bad/token_required.yaml", nil, nil); err == nil || !strings.Contains(err.Error(), "api.token is required") {
		t.Errorf("a file without a token must fail, got %v", err)
	}
}

// exampleEnv fills the secrets examples/surveysync.yaml leaves to the
// environment.
var exampleEnv = []string{
	"SURVEYSYNC_API__TOKEN=example-api-token-value",
	"SURVEYSYNC_WEBHOOKS__PATH=/hooks/9f1c2a7e5b3d4c6f8a0e1b2c",
	"SURVEYSYNC_FEEDS__1__HTTP__TOKEN=example-feed-token-0123456789",
	"SURVEYSYNC_CLICKHOUSE__PASSWORD=example-ch-password",
}

func TestExampleLoads(t *testing.T) {
	c, err := Load(exampleFile(t), exampleEnv, nil)
	if err != nil {
		t.Fatalf("examples/surveysync.yaml:\n%v", err)
	}
	if c.Demo.Emulator.Enabled {
		t.Error("the example must not run the demo")
	}
	if len(c.Feeds) != 3 || c.Feeds[0].Send.Schedule.Window.TimeZone != "Europe/Prague" ||
		c.Feeds[1].HTTP.Token.Value() != "example-feed-token-0123456789" || c.Feeds[2].Interval != time.Hour {
		t.Errorf("feeds not as written: %+v", c.Feeds)
	}
	if c.Feeds[0].Mapping["first_name"] != "Jméno" || c.Feeds[0].Salutation.PrefixMale != "Vážený pane" {
		t.Errorf("UTF-8 values mangled: %+v", c.Feeds[0])
	}
	if got := c.Sync.BackfillFrom; !got.Equal(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("backfill_from = %v", got)
	}
	// Without the environment the example's placeholders are reported.
	_, err = Load(exampleFile(t), nil, newFlags(t, "--set", "webhooks.enabled=true"))
	for _, want := range []string{"api.token is required", "webhooks.path still holds the example's placeholder", "feeds[1].http.token is required"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("without env, want %q in error, got:\n%v", want, err)
		}
	}
}

// TestExampleAsREADMESays: examples/surveysync.yaml with the README's
// edits (surveys, clickhouse.addr, the token in the environment) loads, and
// names no path outside the working folder.
func TestExampleAsREADMESays(t *testing.T) {
	b, err := os.ReadFile("../examples/surveysync.yaml")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(string(b), "surveys: [4574, 4575]", "surveys: [101]", 1)
	text = strings.Replace(text, "addr: [127.0.0.1:9000]", "addr: []", 1)
	path := filepath.Join(t.TempDir(), "surveysync.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path, nil, nil); err == nil || !strings.Contains(err.Error(), "api.token is required") {
		t.Fatalf("without the token: %v", err)
	}
	c, err := Load(path, []string{"SURVEYSYNC_API__TOKEN=tok"}, nil)
	if err != nil {
		t.Fatalf("the example with the README's edits:\n%v", err)
	}
	if len(c.Feeds) != 0 || c.Webhooks.Enabled || c.ClickHouse.Enabled() || !cmp.Equal(c.Surveys, []int64{101}) {
		t.Errorf("feeds %d, webhooks %v, clickhouse %v, surveys %v", len(c.Feeds), c.Webhooks.Enabled, c.ClickHouse.Addr, c.Surveys)
	}
	if strings.Contains(c.Files.URL.Value(), "/var/lib") {
		t.Errorf("files.url %s is outside the working folder", c.Files.URL.Value())
	}
}

// exampleFile is examples/surveysync.yaml with the feeds of
// examples/feeds.yaml in place of its empty list: every key.
func exampleFile(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../examples/surveysync.yaml")
	if err != nil {
		t.Fatal(err)
	}
	feeds, err := os.ReadFile("../examples/feeds.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "\nfeeds: []\n") {
		t.Fatal("examples/surveysync.yaml lacks its `feeds: []` line")
	}
	text := strings.Replace(string(b), "\nfeeds: []\n", "\n"+string(feeds), 1)
	path := filepath.Join(t.TempDir(), "surveysync.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestDemoExampleLoads(t *testing.T) {
	c, err := Load("../examples/demo.yaml", nil, nil)
	if err != nil {
		t.Fatalf("examples/demo.yaml:\n%v", err)
	}
	if !c.Demo.Emulator.Enabled || !c.Webhooks.Enabled || len(c.Feeds) != 1 || c.Parquet.Dir != "./demo-data" {
		t.Errorf("demo config not as written: %+v", c)
	}
}

// TestExampleHasEveryKey keeps examples/surveysync.yaml complete: every key
// of the Config tree appears in it (feed keys in at least one feed).
func TestExampleHasEveryKey(t *testing.T) {
	b, err := os.ReadFile(exampleFile(t))
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := yaml.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	var walk func(v any, path string)
	walk = func(v any, path string) {
		switch x := v.(type) {
		case map[string]any:
			if strings.HasSuffix(path, ".mapping") {
				return // free-form keys
			}
			for k, e := range x {
				p := join(path, k)
				have[p] = true
				walk(e, p)
			}
		case []any:
			for _, e := range x {
				walk(e, path+"[]")
			}
		}
	}
	walk(raw, "")
	var missing []string
	walkKeys(configType, "", func(p string) {
		if !have[p] {
			missing = append(missing, p)
		}
	})
	if len(missing) > 0 {
		t.Errorf("examples/surveysync.yaml lacks keys: %s", strings.Join(missing, ", "))
	}
}

// TestDocsHaveEveryKey keeps docs/configuration.md complete.
func TestDocsHaveEveryKey(t *testing.T) {
	b, err := os.ReadFile("../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	walkKeys(configType, "", func(p string) {
		if !strings.Contains(doc, "`"+p+"`") {
			t.Errorf("docs/configuration.md does not document `%s`", p)
		}
	})
}

func TestGoodFiles(t *testing.T) {
	files, _ := filepath.Glob("testdata/good/*.yaml")
	if len(files) == 0 {
		t.Fatal("no testdata/good files")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			c, err := Load(f, nil, nil)
			if err != nil {
				t.Fatalf("%v", err)
			}
			// Whatever loads prints, and what prints loads back the same.
			roundTrip(t, c)
		})
	}
}

func roundTrip(t *testing.T, c *Config) {
	t.Helper()
	// The masked form is valid YAML; the unmasked one loads back the same.
	var buf bytes.Buffer
	if err := c.Print(&buf); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatalf("Print output is not YAML: %v", err)
	}
	buf.Reset()
	if err := c.print(&buf, false); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "printed.yaml")
	if err := os.WriteFile(p, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	back, err := Load(p, nil, nil)
	if err != nil {
		t.Fatalf("printed configuration does not load:\n%v\n%s", err, buf.String())
	}
	if diff := cmp.Diff(c, back, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("print → load changed the configuration (-before +after):\n%s", diff)
	}
}

func TestDefaultRoundTrips(t *testing.T) { roundTrip(t, Default()) }

func TestBadFilesGolden(t *testing.T) {
	files, _ := filepath.Glob("testdata/bad/*.yaml")
	if len(files) == 0 {
		t.Fatal("no testdata/bad files")
	}
	// Key files are refused when group or others may read them, and a
	// checkout makes them 0644: private, they fail for the reason shown.
	keys, _ := filepath.Glob("testdata/bad/*.key")
	for _, k := range keys {
		if err := os.Chmod(k, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			_, err := Load(f, nil, nil)
			if err == nil {
				t.Fatal("loaded without error")
			}
			got := err.Error() + "\n"
			for _, secret := range []string{"secret-token-value", "1234567890"} {
				if strings.Contains(got, secret) {
					t.Errorf("error leaks a secret %q:\n%s", secret, got)
				}
			}
			golden := strings.TrimSuffix(f, ".yaml") + ".err"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./config -run BadFilesGolden -update)", err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("error differs from %s (-want +got):\n%s", golden, diff)
			}
		})
	}
}

func TestEnvOverrides(t *testing.T) {
	env := []string{
		"SURVEYSYNC_API__TOKEN=env-token",
		"SURVEYSYNC_API__USER_AGENT=acme sync (ops@acme.example)",
		"SURVEYSYNC_API__MAX_CONCURRENCY=3",
		"SURVEYSYNC_API__RATE_LIMIT=2.5",
		"SURVEYSYNC_API__TIMEOUT=1m30s",
		"SURVEYSYNC_SURVEYS=4574, 4575,4576",
		"SURVEYSYNC_SYNC__STATUSES=completed,partial",
		"SURVEYSYNC_SYNC__BATCH__MAX_BYTES=16MiB",
		"SURVEYSYNC_SYNC__BATCH__MAX_ROWS=5000",
		"SURVEYSYNC_SYNC__BACKFILL_FROM=2024-01-31",
		"SURVEYSYNC_CLICKHOUSE__ADDR=a:9000,b:9000",
		"SURVEYSYNC_CLICKHOUSE__SECURE=true",
		"SURVEYSYNC_FILES__ENABLED=false",
		"SURVEYSYNC_METRICS__LISTEN=",
		// Not configuration variables: ignored.
		"SURVEYSYNC_TEST_CLICKHOUSE_ADDR=127.0.0.1:9000",
		"SURVEYSYNC_CONFIG=/etc/surveysync.yaml",
		"HOME=/root",
	}
	c, err := Load("testdata/good/minimal.yaml", env, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.Demo.Emulator.Enabled = false
	want.API.Token = "env-token"
	want.API.UserAgent = "acme sync (ops@acme.example)"
	want.API.MaxConcurrency = 3
	want.API.RateLimit = 2.5
	want.API.Timeout = 90 * time.Second
	want.Surveys = []int64{4574, 4575, 4576}
	want.Sync.Statuses = []string{"completed", "partial"}
	want.Sync.Batch.MaxBytes = 16 << 20
	want.Sync.Batch.MaxRows = 5000
	want.Sync.BackfillFrom = time.Date(2024, 1, 31, 0, 0, 0, 0, time.UTC)
	want.ClickHouse.Addr = []string{"a:9000", "b:9000"}
	want.ClickHouse.Secure = true
	want.Files.Enabled = false
	want.Metrics.Listen = ""
	if diff := cmp.Diff(want, c); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestEnvFeedElement(t *testing.T) {
	env := append([]string{
		"SURVEYSYNC_FEEDS__0__DISTRIBUTION_ID=999",
		"SURVEYSYNC_FEEDS__0__MAPPING__PHONE=Telefon",
		"SURVEYSYNC_FEEDS__0__SEND__SCHEDULE__WINDOW__DAYS=sat,sun",
	}, exampleEnv...)
	c, err := Load(exampleFile(t), env, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := c.Feeds[0]
	if f.DistributionID != 999 || f.Mapping["phone"] != "Telefon" || f.Mapping["email"] != "E-mail" ||
		!cmp.Equal(f.Send.Schedule.Window.Days, []string{"sat", "sun"}) || f.Send.Schedule.Window.From != "09:00" {
		t.Errorf("feed 0 = %+v", f)
	}
}

func TestEnvErrors(t *testing.T) {
	env := []string{
		"SURVEYSYNC_API__TOKN=x",
		"SURVEYSYNC_APII__TOKEN=x",
		"SURVEYSYNC_LOGG=x",
		"SURVEYSYNC_API__TIMEOUT=30",
		"SURVEYSYNC_API__MAX_CONCURRENCY=eight",
		"SURVEYSYNC_SURVEYS=1,two",
		"SURVEYSYNC_API=x",
		"SURVEYSYNC_API__TOKEN__X=x",
		"SURVEYSYNC_FEEDS__5__NAME=x",
		"SURVEYSYNC_FEEDS__X__NAME=x",
		"SURVEYSYNC_CLICKHOUSE__SECURE=maybe",
	}
	_, err := Load("testdata/good/minimal.yaml", env, nil)
	if err == nil {
		t.Fatal("no error")
	}
	got := err.Error()
	for _, w := range []string{
		`unknown key "api.tokn" in environment variable SURVEYSYNC_API__TOKN (did you mean SURVEYSYNC_API__TOKEN?)`,
		`unknown key "apii.token" in environment variable SURVEYSYNC_APII__TOKEN (did you mean SURVEYSYNC_API__TOKEN?)`,
		`unknown key "logg" in environment variable SURVEYSYNC_LOGG (did you mean SURVEYSYNC_LOG?)`,
		`api.timeout in environment variable SURVEYSYNC_API__TIMEOUT: invalid duration "30"`,
		`api.max_concurrency in environment variable SURVEYSYNC_API__MAX_CONCURRENCY: want an integer, got "eight"`,
		`surveys in environment variable SURVEYSYNC_SURVEYS: list item: want an integer, got "two"`,
		`api in environment variable SURVEYSYNC_API: api is a section; set its keys one by one (e.g. SURVEYSYNC_API__BASE_URL)`,
		`unknown key "api.token.x" in environment variable SURVEYSYNC_API__TOKEN__X: api.token is a value, not a section`,
		`feeds[5].name in environment variable SURVEYSYNC_FEEDS__5__NAME: there is no feeds[5]: the configuration file defines 0`,
		`feeds in environment variable SURVEYSYNC_FEEDS__X__NAME: want a list index after feeds (e.g. SURVEYSYNC_FEEDS__0__NAME), got "x"`,
		`clickhouse.secure in environment variable SURVEYSYNC_CLICKHOUSE__SECURE: want true or false, got "maybe"`,
	} {
		if !strings.Contains(got, w) {
			t.Errorf("missing %q in:\n%s", w, got)
		}
	}
	if n := len(strings.Split(got, "\n")); n != 11 {
		t.Errorf("want 11 errors, got %d:\n%s", n, got)
	}
}

func newFlags(t *testing.T, args ...string) *pflag.FlagSet {
	t.Helper()
	fs := pflag.NewFlagSet("surveysync", pflag.ContinueOnError)
	fs.String("config", "", "the CLI's own flag")
	RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return fs
}

func TestFlags(t *testing.T) {
	fs := newFlags(t,
		"--log-level=debug", "--surveys", "1,2",
		"--clickhouse-addr", "ch:9000",
		"--set", "sync.poll_interval=1m",
		"--set", "api.user_agent=flag app (f@g.hi)",
		"--set", "feeds.0.name=renamed",
		"--set", "log.level=warn", // --set comes after the named flags: it wins
	)
	c, err := Load(exampleFile(t), exampleEnv, fs)
	if err != nil {
		t.Fatal(err)
	}
	if c.Log.Level != "warn" || !cmp.Equal(c.Surveys, []int64{1, 2}) || !cmp.Equal(c.ClickHouse.Addr, []string{"ch:9000"}) ||
		c.Sync.PollInterval != time.Minute || c.API.UserAgent != "flag app (f@g.hi)" || c.Feeds[0].Name != "renamed" {
		t.Errorf("flags not applied: log=%q surveys=%v addr=%v poll=%v ua=%q feed=%q",
			c.Log.Level, c.Surveys, c.ClickHouse.Addr, c.Sync.PollInterval, c.API.UserAgent, c.Feeds[0].Name)
	}

	// Flags the command line did not set change nothing.
	c, err = Load(exampleFile(t), exampleEnv, newFlags(t))
	if err != nil {
		t.Fatal(err)
	}
	if c.Log.Level != "info" || len(c.Surveys) != 2 {
		t.Errorf("unset flags changed the configuration: %q %v", c.Log.Level, c.Surveys)
	}

	// --demo on a production file.
	c, err = Load(exampleFile(t), exampleEnv, newFlags(t, "--demo"))
	if err != nil || !c.Demo.Emulator.Enabled {
		t.Errorf("--demo: %v, enabled=%v", err, c != nil && c.Demo.Emulator.Enabled)
	}

	_, err = Load("", nil, newFlags(t, "--set", "api.tokn=x", "--set", "sync.overlap=soon", "--set", "nokey"))
	for _, w := range []string{
		`unknown key "api.tokn" in flag --set api.tokn (did you mean api.token?)`,
		`sync.overlap in flag --set sync.overlap: invalid duration "soon"`,
		`unknown key "nokey" in flag --set nokey`,
	} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("want %q in %v", w, err)
		}
	}
}

func TestPrecedence(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "c.yaml")
	write := func(s string) {
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("api: {token: t, user_agent: a (b@c.de)}\nsync: {overlap: 1m, settle_lag: 1s, poll_interval: 1m}\n")
	env := []string{"SURVEYSYNC_SYNC__SETTLE_LAG=2s", "SURVEYSYNC_SYNC__POLL_INTERVAL=2m"}
	fs := newFlags(t, "--set", "sync.poll_interval=3m")
	c, err := Load(p, env, fs)
	if err != nil {
		t.Fatal(err)
	}
	// default (reconcile 24h) < file (overlap) < env (settle_lag) < flag (poll_interval)
	if c.Sync.ReconcileInterval != 24*time.Hour || c.Sync.Overlap != time.Minute ||
		c.Sync.SettleLag != 2*time.Second || c.Sync.PollInterval != 3*time.Minute {
		t.Errorf("precedence wrong: %+v", c.Sync)
	}
	// A list in a later layer replaces the earlier one, it does not merge.
	write("api: {token: t, user_agent: a (b@c.de)}\nsync: {statuses: [partial, completed, quotafull]}\n")
	c, err = Load(p, []string{"SURVEYSYNC_SYNC__STATUSES=completed"}, nil)
	if err != nil || !cmp.Equal(c.Sync.Statuses, []string{"completed"}) {
		t.Errorf("list override: %v %v", err, c)
	}
	c, err = Load(p, nil, nil)
	if err != nil || !cmp.Equal(c.Sync.Statuses, []string{"partial", "completed", "quotafull"}) {
		t.Errorf("file list replaces the default: %v %v", err, c)
	}
}

func TestValidationNamesWhereAKeyWasSet(t *testing.T) {
	fs := newFlags(t, "--set", "sync.poll_interval=100ms")
	_, err := Load("testdata/good/minimal.yaml", []string{"SURVEYSYNC_API__BASE_URL=http://x/v2", "SURVEYSYNC_LOG__LEVEL=loud"}, fs)
	for _, want := range []string{
		`api.base_url must end in /v1 (got "http://x/v2") [environment variable SURVEYSYNC_API__BASE_URL]`,
		`log.level must be one of debug, info, warn, error (got "loud") [environment variable SURVEYSYNC_LOG__LEVEL]`,
		`sync.poll_interval must be at least 1s (got 100ms) [flag --set sync.poll_interval]`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("want %q in:\n%v", want, err)
		}
	}
	// Validate on a Config built in code names no source.
	c := Default()
	c.Log.Format = "xml"
	if err := c.Validate(); err == nil || err.Error() != `log.format must be text or json (got "xml")` {
		t.Errorf("Validate: %v", err)
	}
}

func TestMissingFile(t *testing.T) {
	_, err := Load("testdata/nope.yaml", nil, nil)
	if err == nil || !strings.Contains(err.Error(), "config file testdata/nope.yaml") {
		t.Errorf("got %v", err)
	}
}

// secretConfig is a valid configuration with every secret set to a value
// that must never be printed.
func secretConfig(t *testing.T) (*Config, []string) {
	t.Helper()
	secrets := map[string]string{
		"SURVEYSYNC_API__TOKEN":                             "s3cr3t-api-token",
		"SURVEYSYNC_CLICKHOUSE__PASSWORD":                   "s3cr3t-ch-pass",
		"SURVEYSYNC_WEBHOOKS__PATH":                         "/hooks/s3cr3tpathsegment0123",
		"SURVEYSYNC_WEBHOOKS__BASIC_AUTH__PASSWORD":         "s3cr3t-basic",
		"SURVEYSYNC_WEBHOOKS__STANDARD_WEBHOOKS_SECRET":     "s3cr3t-standard-webhooks",
		"SURVEYSYNC_FILES__S3__SECRET_ACCESS_KEY":           "s3cr3t-s3-key",
		"SURVEYSYNC_FILES__S3__SESSION_TOKEN":               "s3cr3t-s3-session",
		"SURVEYSYNC_FEEDS__1__HTTP__TOKEN":                  "s3cr3t-feed-token-0123",
		"SURVEYSYNC_PRIVACY__HASH_KEY":                      "s3cr3t-privacy-hash-key",
		"SURVEYSYNC_API__BASE_URL":                          "https://user:s3cr3t-url-pass@api.example.com/v1",
		"SURVEYSYNC_FILES__URL":                             "s3://bucket?region=eu&secret_key=s3cr3t-query",
		"SURVEYSYNC_FILES__S3__ACCESS_KEY_ID":               "AKIAPUBLIC",
		"SURVEYSYNC_WEBHOOKS__BASIC_AUTH__USERNAME":         "hooks",
		"SURVEYSYNC_WEBHOOKS__SIGNATURE_TOLERANCE":          "1m",
		"SURVEYSYNC_WEBHOOKS__REQUIRE_SIGNATURE":            "true",
		"SURVEYSYNC_DEMO__EMULATOR__ENABLED":                "false",
		"SURVEYSYNC_FEEDS__0__SEND__SCHEDULE__WINDOW__FROM": "08:00",
		"SURVEYSYNC_FEEDS__0__SEND__SCHEDULE__WINDOW__TO":   "18:30",
		"SURVEYSYNC_FEEDS__0__SEND__SCHEDULE__WINDOW__DAYS": "Monday,tue",
		"SURVEYSYNC_FEEDS__2__CLICKHOUSE_QUERY__QUERY":      "SELECT 2",
		"SURVEYSYNC_WEBHOOKS__ALLOW_CIDRS":                  "10.0.0.0/8",
		"SURVEYSYNC_SYNC__BATCH__MAX_DELAY":                 "2s",
		"SURVEYSYNC_SHUTDOWN__DRAIN_TIMEOUT":                "1m",
		"SURVEYSYNC_FILES__MAX_SIZE":                        "100MB",
		"SURVEYSYNC_CLICKHOUSE__DIAL_TIMEOUT":               "3s",
		"SURVEYSYNC_SYNC__PARTIAL_LOOKBACK":                 "24h",
	}
	var env []string
	var values []string
	for k, v := range secrets {
		env = append(env, k+"="+v)
		if strings.Contains(v, "s3cr3t") {
			values = append(values, "s3cr3t")
		}
	}
	sort.Strings(env)
	c, err := Load(exampleFile(t), env, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.API.Token.Value() != "s3cr3t-api-token" || c.Webhooks.Path.Value() != "/hooks/s3cr3tpathsegment0123" {
		t.Fatal("secrets not loaded")
	}
	return c, values
}

func TestSecretsMaskedEverywhere(t *testing.T) {
	c, _ := secretConfig(t)
	var outputs = map[string]string{}
	var buf bytes.Buffer
	if err := c.Print(&buf); err != nil {
		t.Fatal(err)
	}
	outputs["Print"] = buf.String()
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X"} {
		outputs[verb] = fmt.Sprintf(verb, c)
		outputs[verb+" value"] = fmt.Sprintf(verb, *c)
	}
	j, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	outputs["json"] = string(j)
	var logs bytes.Buffer
	for _, h := range []slog.Handler{slog.NewTextHandler(&logs, nil), slog.NewJSONHandler(&logs, nil)} {
		slog.New(h).Info("config", "cfg", c, "token", c.API.Token, "api", c.API)
	}
	outputs["slog"] = logs.String()
	outputs["error"] = fmt.Errorf("wrapped: %v %s", c.API.Token, c.Feeds[1].HTTP.Token).Error()
	for name, out := range outputs {
		if strings.Contains(out, "s3cr3t") {
			i := strings.Index(out, "s3cr3t")
			t.Errorf("%s leaks a secret: …%s…", name, out[max(0, i-80):min(len(out), i+40)])
		}
	}
	for _, want := range []string{"token: '***'", "path: /hooks/***", "password: '***'", "https://user:***@api.example.com/v1", "secret_key=***"} {
		if !strings.Contains(outputs["Print"], want) {
			t.Errorf("Print lacks %q:\n%s", want, outputs["Print"])
		}
	}
	// An unset secret prints empty, not ***.
	if s := fmt.Sprintf("%v|%s|%q", Secret(""), Secret(""), Secret("")); s != `||""` {
		t.Errorf("empty secret prints %s", s)
	}
}

func TestSecretTypes(t *testing.T) {
	s := Secret("hunter2")
	for _, got := range []string{s.String(), fmt.Sprint(s), fmt.Sprintf("%+v %#v %x %d", s, s, s, s)} {
		if strings.Contains(got, "hunter2") || strings.Contains(got, fmt.Sprintf("%x", "hunter2")) {
			t.Errorf("leak: %s", got)
		}
	}
	if b, _ := s.MarshalText(); string(b) != "***" {
		t.Errorf("MarshalText = %s", b)
	}
	if b, _ := json.Marshal(struct{ T Secret }{s}); string(b) != `{"T":"***"}` {
		t.Errorf("json = %s", b)
	}
	if s.Value() != "hunter2" {
		t.Error("Value")
	}
	for in, want := range map[SecretPath]string{
		"/hooks/0123456789abcdefgh": "/hooks/***",
		"/a/0123456789abcdefgh/b":   "/a/***/b",
		"/short":                    "/short",
		"":                          "",
		"/webhooks/click4survey/abcdefghijklmnopqrstuvwx": "/webhooks/click4survey/***",
	} {
		if got := fmt.Sprintf("%v", in); got != want {
			t.Errorf("SecretPath(%q) prints %q, want %q", string(in), got, want)
		}
	}
	for in, want := range map[URL]string{
		"https://api.click4survey.com/v1":      "https://api.click4survey.com/v1",
		"https://u:p4ss@h/v1":                  "https://u:***@h/v1",
		"https://u@h/v1":                       "https://u@h/v1",
		"s3://b?region=eu&endpoint=http://x:1": "s3://b?region=eu&endpoint=http://x:1",
		"azblob://c?sig=abc&sv=2020":           "azblob://c?sig=***&sv=2020",
		"::not a url with @ and password":      "***",
	} {
		if got := fmt.Sprintf("%s", in); got != want {
			t.Errorf("URL(%q) prints %q, want %q", string(in), got, want)
		}
	}
}

func TestByteSize(t *testing.T) {
	for in, want := range map[string]ByteSize{
		"16MiB": 16 << 20, "1GiB": 1 << 30, "512KiB": 512 << 10, "100MB": 100e6, "1.5GB": 1.5e9,
		"4096": 4096, "4096B": 4096, "1 mib": 1 << 20, "0": 0, "2TiB": 2 << 40,
	} {
		got, err := ParseByteSize(in)
		if err != nil || got != want {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "MiB", "-1MiB", "1XB", "lots"} {
		if _, err := ParseByteSize(bad); err == nil {
			t.Errorf("ParseByteSize(%q) accepted", bad)
		}
	}
	for in, want := range map[ByteSize]string{64 << 20: "64MiB", 1 << 30: "1GiB", 1500: "1500B", 0: "0", 3 << 10: "3KiB"} {
		if got := in.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", int64(in), got, want)
		}
	}
}

func TestFormatDuration(t *testing.T) {
	for in, want := range map[time.Duration]string{
		30 * time.Second: "30s", 10 * time.Minute: "10m", 72 * time.Hour: "72h",
		90 * time.Minute: "1h30m", 250 * time.Millisecond: "250ms", 0: "0s", time.Hour + time.Second: "1h0m1s",
	} {
		if got := FormatDuration(in); got != want {
			t.Errorf("FormatDuration(%v) = %q, want %q", in, got, want)
		}
	}
}

func TestClockAndWeekday(t *testing.T) {
	if d, err := ParseClock("09:30"); err != nil || d != 9*time.Hour+30*time.Minute {
		t.Errorf("ParseClock: %v %v", d, err)
	}
	for _, bad := range []string{"9:00", "25:00", "12:60", "noon", "24:01"} {
		if _, err := ParseClock(bad); err == nil {
			t.Errorf("ParseClock(%q) accepted", bad)
		}
	}
	if d, err := ParseWeekday("Friday"); err != nil || d != time.Friday {
		t.Errorf("ParseWeekday: %v %v", d, err)
	}
	if d, err := ParseWeekday("SUN"); err != nil || d != time.Sunday {
		t.Errorf("ParseWeekday: %v %v", d, err)
	}
}

func TestRegisterFlagsUsage(t *testing.T) {
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	RegisterFlags(fs)
	for _, name := range []string{"set", "demo", "api-base-url", "surveys", "clickhouse-addr", "parquet-dir", "webhooks-listen", "metrics-listen", "log-level", "log-format"} {
		if fs.Lookup(name) == nil {
			t.Errorf("flag --%s missing", name)
		}
	}
	// Every named flag sets a real key.
	for _, f := range namedFlags {
		if _, _, err := resolveKey(strings.Split(f.key, "."), entry{origin: "test"}); err != nil {
			t.Errorf("--%s: %v", f.name, err)
		}
	}
}

// TestNewUserEnvAndSetMistakes: the variable and flag spellings a new user
// gets wrong get an answer naming the right one.
func TestNewUserEnvAndSetMistakes(t *testing.T) {
	_, _, err := LoadWarnings("", []string{"SURVEYSYNC_API_TOKEN=x"}, nil)
	want := "environment variable SURVEYSYNC_API_TOKEN sets nothing: levels of a key are separated by a double underscore (did you mean SURVEYSYNC_API__TOKEN?)"
	if err == nil || err.Error() != want {
		t.Errorf("SURVEYSYNC_API_TOKEN: got %v, want %q", err, want)
	}
	_, _, err = LoadWarnings("", []string{"SURVEYSYNC_SYNC_BATCH_MAX_ROWS=5"}, nil)
	if err == nil || !strings.Contains(err.Error(), "did you mean SURVEYSYNC_SYNC__BATCH__MAX_ROWS?") {
		t.Errorf("SURVEYSYNC_SYNC_BATCH_MAX_ROWS: %v", err)
	}
	_, warnings, err := LoadWarnings("", []string{"SURVEYSYNC_TEST_CLICKHOUSE_ADDR=x", "SURVEYSYNC_BENCH_OUT=x", "SURVEYSYNC_WHATEVER=1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantW := []string{"environment variable SURVEYSYNC_WHATEVER is not a configuration key; ignored (keys are SURVEYSYNC_<SECTION>__<KEY>, e.g. SURVEYSYNC_API__TOKEN)"}
	if !cmp.Equal(warnings, wantW) {
		t.Errorf("warnings %q, want %q", warnings, wantW)
	}
	// Messages name list elements feeds[1].http.listen; --set takes that form.
	c, err := Load(exampleFile(t), exampleEnv, newFlags(t, "--set", "feeds[1].http.listen=127.0.0.1:18099"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Feeds[1].HTTP.Listen != "127.0.0.1:18099" {
		t.Errorf("feeds[1].http.listen = %q", c.Feeds[1].HTTP.Listen)
	}
}

func TestHA(t *testing.T) {
	c, err := Load("", []string{
		"SURVEYSYNC_API__TOKEN=t", "SURVEYSYNC_API__BASE_URL=https://api.example.com/v1", "SURVEYSYNC_API__USER_AGENT=acme (data@acme.example)",
		"SURVEYSYNC_HA__SERVERS=zk1:2181,zk2:2181", "SURVEYSYNC_HA__SESSION_TIMEOUT=6s",
		"SURVEYSYNC_HA__INSTANCE=node-a", "SURVEYSYNC_CLICKHOUSE__ADDR=127.0.0.1:9000",
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !c.HA.Enabled() || len(c.HA.Servers) != 2 || c.HA.SessionTimeout != 6*time.Second || c.HA.Instance != "node-a" {
		t.Fatalf("ha = %+v", c.HA)
	}
	root := c.HARoot()
	if !strings.HasPrefix(root, "/surveysync/surveysync-") || len(root) != len("/surveysync/surveysync-")+16 {
		t.Fatalf("default root %q", root)
	}
	// The token is no part of the root; the base URL and database are.
	c2 := *c
	c2.API.Token = "another"
	if c2.HARoot() != root {
		t.Error("the root depends on the token")
	}
	c2.ClickHouse.Database = "other"
	if c2.HARoot() == root {
		t.Error("the root does not depend on the database")
	}
	c2 = *c
	c2.HA.Root = "/mine/acme"
	if c2.HARoot() != "/mine/acme" {
		t.Error("ha.root not used")
	}
	if d := Default(); d.HA.Enabled() || d.HA.SessionTimeout != 10*time.Second {
		t.Errorf("defaults: %+v", d.HA)
	}

	for _, tc := range []struct{ env, want string }{
		{"SURVEYSYNC_HA__SERVERS=zk1", "ha.servers[0]"},
		{"SURVEYSYNC_HA__SESSION_TIMEOUT=100ms", "ha.session_timeout must be between 1s and 5m"},
		{"SURVEYSYNC_HA__ROOT=relative/path", "ha.root must be an absolute znode path"},
		{"SURVEYSYNC_HA__ROOT=/a/", "ha.root must be an absolute znode path"},
		{"SURVEYSYNC_HA__INSTANCE=a\tb", "ha.instance must be at most 200 printable"},
		{"SURVEYSYNC_HA__USERNAME=zk", "ha.password is empty while ha.username is set"},
		{"SURVEYSYNC_HA__PASSWORD=zk-pw-not-shown", "ha.username is empty while ha.password is set"},
	} {
		_, err := Load("", []string{"SURVEYSYNC_API__TOKEN=t", "SURVEYSYNC_API__BASE_URL=https://api.example.com/v1", "SURVEYSYNC_API__USER_AGENT=acme (data@acme.example)", tc.env}, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.env, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "zk-pw-not-shown") {
			t.Errorf("%s: the password is in the error: %v", tc.env, err)
		}
	}
	ca, err := Load("", []string{"SURVEYSYNC_API__TOKEN=t", "SURVEYSYNC_API__BASE_URL=https://api.example.com/v1", "SURVEYSYNC_API__USER_AGENT=acme (data@acme.example)",
		"SURVEYSYNC_HA__SERVERS=zk1:2181", "SURVEYSYNC_HA__USERNAME=zk", "SURVEYSYNC_HA__PASSWORD=zk-pw-not-shown"}, nil)
	if err != nil || ca.HA.Username != "zk" || ca.HA.Password.Value() != "zk-pw-not-shown" {
		t.Fatalf("ha auth from the environment: %+v, %v", ca.HA, err)
	}
	if out := fmt.Sprintf("%+v", ca.HA); strings.Contains(out, "zk-pw-not-shown") {
		t.Errorf("ha prints its password: %s", out)
	}
}

// Object stores other than a folder and S3-compatible storage: the URL
// and the files.<store> keys earlier examples offered are refused with
// what is supported and the way around (a gateway).
func TestUnsupportedObjectStores(t *testing.T) {
	wantAll := []string{"is not supported", "file:///abs/dir", "S3-compatible", "gateway", "docs/files.md"}
	check := func(what string, err error, want string) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s: loaded", what)
		}
		for _, w := range append([]string{want}, wantAll...) {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: want %q in:\n%v", what, w, err)
			}
		}
	}
	env := []string{"SURVEYSYNC_API__TOKEN=tok"}
	for url, want := range map[string]string{
		"gs://bucket":        `files.url Google Cloud Storage (gs://)`,
		"azblob://container": `files.url Azure Blob Storage (azblob://)`,
		"ftp://host/dir":     `files.url scheme "ftp"`,
	} {
		_, err := Load("testdata/good/minimal.yaml", append(env, "SURVEYSYNC_FILES__URL="+url), nil)
		check(url, err, want)
	}
	for yaml, want := range map[string]string{
		"files:\n  azblob:\n    account_name: acct\n": "files.azblob in ",
		"files:\n  gcs:\n    bucket: b\n":             "files.gcs in ",
	} {
		base, err := os.ReadFile("testdata/good/minimal.yaml")
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(t.TempDir(), "c.yaml")
		if err := os.WriteFile(p, append(append(base, '\n'), yaml...), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err = Load(p, env, nil)
		check(yaml, err, want)
	}
	_, err := Load("testdata/good/minimal.yaml", append(env, "SURVEYSYNC_FILES__AZBLOB__ACCOUNT_KEY=k"), nil)
	check("env", err, "files.azblob in environment variable SURVEYSYNC_FILES__AZBLOB__ACCOUNT_KEY")
}

// TestHAExampleLoads: examples/ha.yaml in place of examples/surveysync.yaml's
// ha section,
// loaded as two daemons with their instance names from the environment:
// both elect under one root, with the example's servers and timeout.
func TestHAExampleLoads(t *testing.T) {
	base, err := os.ReadFile(exampleFile(t))
	if err != nil {
		t.Fatal(err)
	}
	ha, err := os.ReadFile("../examples/ha.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// The example's own ha section (no election) gives way to ha.yaml's.
	text := string(base)
	i, j := strings.Index(text, "\nha:\n"), strings.Index(text, "\nlog:\n")
	if i < 0 || j < i {
		t.Fatal("examples/surveysync.yaml: no ha section before log")
	}
	text = text[:i+1] + string(ha) + text[j:]
	path := filepath.Join(t.TempDir(), "ha.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	var roots []string
	for _, inst := range []string{"surveysync-0", "surveysync-1"} {
		c, err := Load(path, append(slices.Clone(exampleEnv), "SURVEYSYNC_HA__INSTANCE="+inst), nil)
		if err != nil {
			t.Fatalf("examples/surveysync.yaml with examples/ha.yaml:\n%v", err)
		}
		if !c.HA.Enabled() || !slices.Equal(c.HA.Servers, []string{"zk1:2181", "zk2:2181", "zk3:2181"}) ||
			c.HA.SessionTimeout != 10*time.Second || c.HA.Instance != inst {
			t.Errorf("ha not as written: %+v", c.HA)
		}
		roots = append(roots, c.HARoot())
	}
	if roots[0] != roots[1] || !strings.HasPrefix(roots[0], "/surveysync/") {
		t.Errorf("the two daemons elect under %v", roots)
	}
}

func TestSurveysExclude(t *testing.T) {
	base := []string{"SURVEYSYNC_API__TOKEN=t", "SURVEYSYNC_API__BASE_URL=https://api.example.com/v1", "SURVEYSYNC_API__USER_AGENT=acme (data@acme.example)", "SURVEYSYNC_SURVEYS=1,2"}
	c, err := Load("", append(base, "SURVEYSYNC_SURVEYS_EXCLUDE=7,8"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.SurveysExclude) != 2 || c.SurveysExclude[1] != 8 {
		t.Fatalf("surveys_exclude = %v", c.SurveysExclude)
	}
	for _, tc := range []struct{ env, want string }{
		{"SURVEYSYNC_SURVEYS_EXCLUDE=0", "surveys_exclude[0] must be a positive survey id (got 0)"},
		{"SURVEYSYNC_SURVEYS_EXCLUDE=7,2", "surveys_exclude[1] survey 2 is in surveys too"},
		{"SURVEYSYNC_SURVEYS_EXCLUDE=7,7", "surveys_exclude[1] repeats survey 7"},
	} {
		if _, err := Load("", append(base, tc.env), nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.env, err, tc.want)
		}
	}
}

// feeds[].csv_dir.max_record_bytes: 1MiB by default, set by the
// environment, refused outside 1KiB–1GiB with the key named.
func TestFeedMaxRecordBytes(t *testing.T) {
	c, err := Load(exampleFile(t), exampleEnv, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Feeds[0].CSVDir.MaxRecordBytes; got != 1<<20 {
		t.Fatalf("default %d", got)
	}
	c, err = Load(exampleFile(t), append([]string{"SURVEYSYNC_FEEDS__0__CSV_DIR__MAX_RECORD_BYTES=4MiB"}, exampleEnv...), nil)
	if err != nil || c.Feeds[0].CSVDir.MaxRecordBytes != 4<<20 {
		t.Fatalf("4MiB: %v %v", c, err)
	}
	_, err = Load(exampleFile(t), append([]string{"SURVEYSYNC_FEEDS__0__CSV_DIR__MAX_RECORD_BYTES=100"}, exampleEnv...), nil)
	if err == nil || !strings.Contains(err.Error(), "feeds[0].csv_dir.max_record_bytes") {
		t.Fatalf("100 bytes: %v", err)
	}
}
