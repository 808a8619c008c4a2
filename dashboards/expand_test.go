package dashboards

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// This file expands a Survey results query the way Grafana and the
// grafana-clickhouse-datasource plugin do before ClickHouse sees it:
//
//  1. Grafana substitutes the template variables ($name, ${name},
//     ${name:format}) in the browser;
//  2. the plugin's backend expands its macros (pkg/macros/macros.go of
//     grafana/clickhouse-datasource v4): $__timeFilter(col) becomes
//     "col >= toDateTime(<from s>) AND col <= toDateTime(<to s>)",
//     $__fromTime / $__toTime "toDateTime(<s>)", the _ms variants
//     fromUnixTimestamp64Milli(<ms>), $__dateFilter(col) toDate('YYYY-MM-DD')
//     bounds, $__dateTimeFilter(d, t) / $__dt both, $__timeInterval(col)
//     toStartOfInterval(toDateTime(col), INTERVAL <n> second), $__interval_s
//     the interval in seconds (at least 1).
//
// An unknown macro is an error, so a typo fails the test rather than
// reaching the server.

type timeRange struct{ from, to time.Time }

func mustTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

// grafanaRange resolves a dashboard's relative time range ("now-90d", "now").
func grafanaRange(from, to string, now time.Time) (timeRange, error) {
	parse := func(s string) (time.Time, error) {
		if s == "now" {
			return now, nil
		}
		m := regexp.MustCompile(`^now-(\d+)([smhdw])$`).FindStringSubmatch(s)
		if m == nil {
			return time.Time{}, fmt.Errorf("time %q: only now and now-N[smhdw] are supported", s)
		}
		n, _ := strconv.Atoi(m[1])
		unit := map[string]time.Duration{"s": time.Second, "m": time.Minute, "h": time.Hour, "d": 24 * time.Hour, "w": 7 * 24 * time.Hour}[m[2]]
		return now.Add(-time.Duration(n) * unit), nil
	}
	f, err := parse(from)
	if err != nil {
		return timeRange{}, err
	}
	t, err := parse(to)
	if err != nil {
		return timeRange{}, err
	}
	return timeRange{f, t}, nil
}

type sqlQuery struct {
	where string
	sql   string
	panel panel
}

func resultsQueries(t *testing.T, d dashboard) []sqlQuery {
	t.Helper()
	var out []sqlQuery
	for _, p := range d.panels() {
		for _, tg := range p.Targets {
			out = append(out, sqlQuery{where: fmt.Sprintf("panel %q target %s", p.Title, tg.RefID), sql: tg.RawSQL, panel: p})
		}
	}
	if len(out) == 0 {
		t.Fatal("no queries in " + resultsFile)
	}
	return out
}

// expandVars substitutes Grafana template variables. vars maps a name to its
// value; name+":text" may hold the display text for ${name:text}.
func expandVars(s string, vars map[string]string) (string, error) {
	var err error
	out := grafanaVarRe.ReplaceAllStringFunc(s, func(m string) string {
		sm := grafanaVarRe.FindStringSubmatch(m)
		name, format := sm[1]+sm[3], sm[2]
		if strings.HasPrefix(name, "__") {
			return m // a macro, for the data source
		}
		if format == "text" {
			if v, ok := vars[name+":text"]; ok {
				return v
			}
		}
		v, ok := vars[name]
		if !ok {
			err = fmt.Errorf("variable $%s has no value", name)
			return m
		}
		return v
	})
	return out, err
}

// expandSQL applies variables, then macros.
func expandSQL(sql string, vars map[string]string, rng timeRange, interval time.Duration) (string, error) {
	s, err := expandVars(sql, vars)
	if err != nil {
		return "", err
	}
	return expandMacros(s, rng, interval)
}

var macroRe = regexp.MustCompile(`\$__(\w+)`)

func expandMacros(s string, rng timeRange, interval time.Duration) (string, error) {
	var b strings.Builder
	for {
		loc := macroRe.FindStringSubmatchIndex(s)
		if loc == nil {
			b.WriteString(s)
			return b.String(), nil
		}
		b.WriteString(s[:loc[0]])
		name := s[loc[2]:loc[3]]
		rest := s[loc[1]:]
		var args []string
		if strings.HasPrefix(rest, "(") {
			depth, end := 0, -1
			for i, c := range rest {
				if c == '(' {
					depth++
				} else if c == ')' {
					depth--
					if depth == 0 {
						end = i
						break
					}
				}
			}
			if end < 0 {
				return "", fmt.Errorf("macro $__%s: unbalanced parentheses", name)
			}
			for _, a := range strings.Split(rest[1:end], ",") {
				if a = strings.TrimSpace(a); a != "" {
					args = append(args, a)
				}
			}
			rest = rest[end+1:]
		}
		out, err := macro(name, args, rng, interval)
		if err != nil {
			return "", err
		}
		b.WriteString(out)
		s = rest
	}
}

func macro(name string, args []string, rng timeRange, interval time.Duration) (string, error) {
	dt := func(t time.Time) string { return fmt.Sprintf("toDateTime(%d)", t.Unix()) }
	dt64 := func(t time.Time) string { return fmt.Sprintf("fromUnixTimestamp64Milli(%d)", t.UnixMilli()) }
	date := func(t time.Time) string { return fmt.Sprintf("toDate('%s')", t.UTC().Format("2006-01-02")) }
	need := func(n int) error {
		if len(args) != n {
			return fmt.Errorf("macro $__%s: expected %d argument(s), got %d", name, n, len(args))
		}
		return nil
	}
	secs := int(math.Max(interval.Seconds(), 1))
	switch name {
	case "fromTime":
		return dt(rng.from), nil
	case "toTime":
		return dt(rng.to), nil
	case "fromTime_ms":
		return dt64(rng.from), nil
	case "toTime_ms":
		return dt64(rng.to), nil
	case "timeFilter", "timeFilter_ms":
		if err := need(1); err != nil {
			return "", err
		}
		f := dt
		if name == "timeFilter_ms" {
			f = dt64
		}
		return fmt.Sprintf("%s >= %s AND %s <= %s", args[0], f(rng.from), args[0], f(rng.to)), nil
	case "dateFilter":
		if err := need(1); err != nil {
			return "", err
		}
		return fmt.Sprintf("%s >= %s AND %s <= %s", args[0], date(rng.from), args[0], date(rng.to)), nil
	case "dateTimeFilter", "dt":
		if err := need(2); err != nil {
			return "", err
		}
		return fmt.Sprintf("(%s >= %s AND %s <= %s) AND (%s >= %s AND %s <= %s)",
			args[0], date(rng.from), args[0], date(rng.to), args[1], dt(rng.from), args[1], dt(rng.to)), nil
	case "timeInterval":
		if err := need(1); err != nil {
			return "", err
		}
		return fmt.Sprintf("toStartOfInterval(toDateTime(%s), INTERVAL %d second)", args[0], secs), nil
	case "interval_s":
		return strconv.Itoa(secs), nil
	}
	return "", fmt.Errorf("unknown macro $__%s", name)
}
