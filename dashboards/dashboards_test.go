package dashboards

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"go.uber.org/goleak"
	"go.yaml.in/yaml/v3"
)

func TestMain(m *testing.M) {
	code := m.Run()
	cleanupBinary()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// --- the dashboard files ------------------------------------------------------

const (
	healthFile  = "sync-health.json"
	resultsFile = "survey-results.json"
	alertsFile  = "alerts.yaml"

	promDSUID = "${DS_PROMETHEUS}"
	chDSUID   = "${DS_CLICKHOUSE}"
	chPlugin  = "grafana-clickhouse-datasource"
)

type dsRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type target struct {
	Datasource *dsRef `json:"datasource"`
	RefID      string `json:"refId"`
	Expr       string `json:"expr"`
	RawSQL     string `json:"rawSql"`
	Format     any    `json:"format"` // ClickHouse: 0 time series, 1 table; Prometheus: "table", "time_series"
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *dsRef `json:"datasource"`
	GridPos    struct {
		X, Y, W, H int
	} `json:"gridPos"`
	Targets []target `json:"targets"`
	Panels  []panel  `json:"panels"`
}

type variable struct {
	Name       string `json:"name"`
	Type       string `json:"type"`
	Datasource *dsRef `json:"datasource"`
	Query      any    `json:"query"`
}

// query is the variable's query text, whichever shape it is stored in.
func (v variable) query() string {
	switch q := v.Query.(type) {
	case string:
		return q
	case map[string]any:
		for _, k := range []string{"rawSql", "query"} {
			if s, ok := q[k].(string); ok {
				return s
			}
		}
	}
	return ""
}

type dashboard struct {
	UID        string `json:"uid"`
	Title      string `json:"title"`
	Time       struct{ From, To string }
	Templating struct {
		List []variable `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

func loadDashboard(t *testing.T, name string) (dashboard, []byte) {
	t.Helper()
	raw, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return d, raw
}

// panels returns every panel, those inside rows too, without the rows.
func (d dashboard) panels() []panel {
	var out []panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			out = append(out, p)
		}
	}
	walk(d.Panels)
	return out
}

func (d dashboard) variable(name string) (variable, bool) {
	for _, v := range d.Templating.List {
		if v.Name == name {
			return v, true
		}
	}
	return variable{}, false
}

// --- PromQL expressions ----------------------------------------------------------

// promExpr is one PromQL expression and where it comes from.
type promExpr struct {
	where string
	expr  string // as written, with Grafana variables
	alert bool   // an alert rule's condition (empty is its normal state)
}

var labelValuesRe = regexp.MustCompile(`^label_values\((.*),\s*(\w+)\)$`)

// healthExprs lists every PromQL expression of the Sync health dashboard:
// each target, and the selector of each label_values() variable.
func healthExprs(t *testing.T) []promExpr {
	t.Helper()
	d, _ := loadDashboard(t, healthFile)
	var out []promExpr
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := labelValuesRe.FindStringSubmatch(v.query())
		if m == nil {
			t.Fatalf("%s: variable %s: query %q is not label_values(selector, label)", healthFile, v.Name, v.query())
		}
		out = append(out, promExpr{where: "variable " + v.Name, expr: m[1]})
	}
	for _, p := range d.panels() {
		for _, tg := range p.Targets {
			out = append(out, promExpr{where: fmt.Sprintf("panel %q target %s", p.Title, tg.RefID), expr: tg.Expr})
		}
	}
	return out
}

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func alertExprs(t *testing.T) []promExpr {
	t.Helper()
	raw, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.Unmarshal(raw, &rf); err != nil {
		t.Fatalf("%s: %v", alertsFile, err)
	}
	var out []promExpr
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			out = append(out, promExpr{where: "alert " + r.Alert, expr: strings.TrimSpace(r.Expr), alert: true})
		}
	}
	return out
}

var grafanaVarRe = regexp.MustCompile(`\$\{(\w+)(?::(\w+))?\}|\$(\w+)`)

// expandPromVars substitutes Grafana's variables in a PromQL expression the
// way a dashboard with every picker on "All" sends it: custom variables
// become their allValue ".*"; the interval variables a fixed duration fit
// for a 1 s scrape interval.
func expandPromVars(expr string) string {
	return grafanaVarRe.ReplaceAllStringFunc(expr, func(m string) string {
		s := grafanaVarRe.FindStringSubmatch(m)
		name := s[1] + s[3]
		switch name {
		case "__rate_interval", "__interval", "__range":
			return "10s"
		case "__range_s", "__interval_ms":
			return "10"
		}
		return ".*"
	})
}

var metricRe = regexp.MustCompile(`\b((?:surveysync|process|go)_[a-z0-9_]+)\b|\b(up)\{`)

// metricNames are the metric names an expression reads.
func metricNames(expr string) []string {
	var out []string
	for _, m := range metricRe.FindAllStringSubmatch(expr, -1) {
		n := m[1] + m[2]
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// familyOf maps a series name to its metric family (histogram suffixes).
func familyOf(name string, known func(string) bool) string {
	if known(name) {
		return name
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if f, ok := strings.CutSuffix(name, suf); ok && known(f) {
			return f
		}
	}
	return name
}

// --- docs/metrics.md ---------------------------------------------------------

// docMetric is a row of docs/metrics.md.
type docMetric struct {
	name string
	when string // always, clickhouse, webhooks, feeds, files, ha, first event
}

var docRowRe = regexp.MustCompile("^\\| `(surveysync_[a-z0-9_]+)` \\| ([a-z]+) \\|[^|]*\\| ([a-z ]+) \\| ")

func loadMetricsDoc(t *testing.T) map[string]docMetric {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]docMetric{}
	for i, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, "| `surveysync_") {
			continue
		}
		m := docRowRe.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("docs/metrics.md:%d: row not in the form | `name` | type | labels | when | meaning |", i+1)
		}
		switch m[3] {
		case "always", "clickhouse", "webhooks", "feeds", "files", "ha", "first event":
		default:
			t.Fatalf("docs/metrics.md:%d: unknown 'when' %q", i+1, m[3])
		}
		if _, dup := out[m[1]]; dup {
			t.Fatalf("docs/metrics.md:%d: %s listed twice", i+1, m[1])
		}
		out[m[1]] = docMetric{name: m[1], when: m[3]}
	}
	if len(out) < 40 {
		t.Fatalf("docs/metrics.md lists only %d metrics", len(out))
	}
	return out
}

// sourceMetricNames are the metric names defined in the Go sources (Name:
// "surveysync_…" in the non-test files), so that docs/metrics.md can be
// checked even for families the running daemon has no series of yet.
func sourceMetricNames(t *testing.T) map[string]string {
	t.Helper()
	nameRe := regexp.MustCompile(`Name:\s*"(surveysync_[a-z0-9_]+)"`)
	out := map[string]string{}
	root := ".."
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "bench") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range nameRe.FindAllStringSubmatch(string(src), -1) {
			out[m[1]] = path
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// --- static checks -------------------------------------------------------------

func TestDashboardsAreWellFormed(t *testing.T) {
	doc := loadMetricsDoc(t)
	for _, tc := range []struct {
		file, dsVar, dsType string
	}{
		{healthFile, "DS_PROMETHEUS", "prometheus"},
		{resultsFile, "DS_CLICKHOUSE", chPlugin},
	} {
		t.Run(tc.file, func(t *testing.T) {
			d, raw := loadDashboard(t, tc.file)
			if d.UID == "" || d.Title == "" {
				t.Error("dashboard needs a uid and a title")
			}
			// The data source is a template variable, never a fixed UID.
			v, ok := d.variable(tc.dsVar)
			if !ok || v.Type != "datasource" || v.query() != tc.dsType {
				t.Errorf("variable %s must be a datasource variable of type %s", tc.dsVar, tc.dsType)
			}
			want := dsRef{Type: tc.dsType, UID: "${" + tc.dsVar + "}"}
			uidRe := regexp.MustCompile(`"uid":\s*"([^"]*)"`)
			for _, m := range uidRe.FindAllStringSubmatch(string(raw), -1) {
				if m[1] != d.UID && m[1] != want.UID && m[1] != "-- Grafana --" {
					t.Errorf("hard-coded uid %q", m[1])
				}
			}
			defined := map[string]bool{}
			for _, v := range d.Templating.List {
				defined[v.Name] = true
				if v.Type == "query" && (v.Datasource == nil || *v.Datasource != want) {
					t.Errorf("variable %s: datasource %v, want %v", v.Name, v.Datasource, want)
				}
			}
			checkVars := func(where, s string) {
				for _, m := range grafanaVarRe.FindAllStringSubmatch(s, -1) {
					name := m[1] + m[3]
					if !strings.HasPrefix(name, "__") && !defined[name] {
						t.Errorf("%s uses undefined variable $%s", where, name)
					}
				}
			}
			for _, v := range d.Templating.List {
				if v.Type == "query" {
					checkVars("variable "+v.Name, v.query())
				}
			}
			ids := map[int]bool{}
			for _, p := range d.panels() {
				where := fmt.Sprintf("panel %d %q", p.ID, p.Title)
				if ids[p.ID] {
					t.Errorf("%s: duplicate id", where)
				}
				ids[p.ID] = true
				if p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X+p.GridPos.W > 24 {
					t.Errorf("%s: bad gridPos %+v", where, p.GridPos)
				}
				if p.Datasource == nil || *p.Datasource != want {
					t.Errorf("%s: datasource %v, want %v", where, p.Datasource, want)
				}
				checkVars(where, p.Title)
				if len(p.Targets) == 0 {
					t.Errorf("%s: no queries", where)
				}
				for _, tg := range p.Targets {
					if tg.Datasource == nil || *tg.Datasource != want {
						t.Errorf("%s target %s: datasource %v, want %v", where, tg.RefID, tg.Datasource, want)
					}
					q := tg.Expr
					if tc.dsType == chPlugin {
						q = tg.RawSQL
						if f, ok := tg.Format.(float64); !ok || (f != 0 && f != 1) {
							t.Errorf("%s target %s: format must be 0 (time series) or 1 (table)", where, tg.RefID)
						}
					}
					if strings.TrimSpace(q) == "" {
						t.Errorf("%s target %s: empty query", where, tg.RefID)
					}
					checkVars(where, q)
				}
			}
		})
	}

	// Every metric a dashboard or alert reads is documented.
	for _, e := range append(healthExprs(t), alertExprs(t)...) {
		for _, n := range metricNames(e.expr) {
			if strings.HasPrefix(n, "go_") || strings.HasPrefix(n, "process_") || n == "up" {
				continue
			}
			if _, ok := doc[familyOf(n, func(s string) bool { _, ok := doc[s]; return ok })]; !ok {
				t.Errorf("%s reads %s, which docs/metrics.md does not list", e.where, n)
			}
		}
	}
}

// Every metric defined in the sources is in docs/metrics.md, and the other
// way round.
func TestMetricsDocMatchesSources(t *testing.T) {
	doc := loadMetricsDoc(t)
	src := sourceMetricNames(t)
	for n, path := range src {
		if _, ok := doc[n]; !ok {
			t.Errorf("%s (defined in %s) is missing from docs/metrics.md", n, path)
		}
	}
	for n := range doc {
		if _, ok := src[n]; !ok {
			t.Errorf("docs/metrics.md lists %s, which no source file defines", n)
		}
	}
}

// The macros and variables of every Survey results query expand to SQL
// (unknown macros fail here, before any server is involved).
func TestSurveyResultsQueriesExpand(t *testing.T) {
	d, _ := loadDashboard(t, resultsFile)
	vars := map[string]string{"database": "surveysync", "survey_id": "4574", "question_id": "10"}
	rng := timeRange{from: mustTime("2026-01-01T00:00:00Z"), to: mustTime("2026-02-01T00:00:00Z")}
	for _, q := range resultsQueries(t, d) {
		sql, err := expandSQL(q.sql, vars, rng, 0)
		if err != nil {
			t.Errorf("%s: %v", q.where, err)
			continue
		}
		if strings.Contains(sql, "$") {
			t.Errorf("%s: unexpanded $ left in %s", q.where, sql)
		}
	}
	got, err := expandSQL("WHERE $__timeFilter(date_created) AND x < $__toTime AND $__fromTime_ms > 0 AND d = ${database}.t", vars, rng, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := "WHERE date_created >= toDateTime(1767225600) AND date_created <= toDateTime(1769904000) AND x < toDateTime(1769904000) AND fromUnixTimestamp64Milli(1767225600000) > 0 AND d = surveysync.t"
	if got != want {
		t.Errorf("expandSQL:\n got %s\nwant %s", got, want)
	}
	if _, err := expandSQL("$__unknownMacro(x)", vars, rng, 0); err == nil {
		t.Error("an unknown macro must fail")
	}
}

func TestAlertRulesWithPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (Debian package prometheus)")
	}
	for _, args := range [][]string{{"check", "rules", alertsFile}, {"test", "rules", "alerts_test.yaml"}} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	// Every rule has a severity, a summary and a description, and is
	// exercised by alerts_test.yaml.
	raw, err := os.ReadFile("alerts_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	src, _ := os.ReadFile(alertsFile)
	if err := yaml.Unmarshal(src, &rf); err != nil {
		t.Fatal(err)
	}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Labels["severity"] != "critical" && r.Labels["severity"] != "warning" {
				t.Errorf("%s: severity %q", r.Alert, r.Labels["severity"])
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: needs summary and description", r.Alert)
			}
			if !regexp.MustCompile(`alertname: ` + r.Alert + `\n\s+exp_alerts:\n\s+- exp_labels`).Match(raw) {
				t.Errorf("%s: no firing case in alerts_test.yaml", r.Alert)
			}
		}
	}
}
