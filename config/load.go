package config

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/confmap"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/v2"
	"github.com/spf13/pflag"
	yaml3 "go.yaml.in/yaml/v3"
)

// EnvPrefix starts every environment variable that sets a configuration
// key. After it, a double underscore separates the levels of the key and
// the rest is lower-cased: SURVEYSYNC_API__TOKEN sets api.token,
// SURVEYSYNC_SYNC__BATCH__MAX_ROWS sets sync.batch.max_rows,
// SURVEYSYNC_FEEDS__0__HTTP__TOKEN sets feeds[0].http.token (of a feed the
// file defines). Lists are comma-separated.
const EnvPrefix = "SURVEYSYNC_"

// SetFlag is the repeatable flag that overrides any key: --set key=value.
const SetFlag = "set"

// namedFlags are the flags RegisterFlags defines besides --set, with the
// key each sets.
var namedFlags = []struct {
	name, key, usage string
	isBool           bool
}{
	{name: "demo", key: "demo.emulator.enabled", usage: "run against the built-in emulator of the survey service (demo.emulator.enabled)", isBool: true},
	{name: "api-base-url", key: "api.base_url", usage: "base URL of the survey service API, ending in /v1 (api.base_url)"},
	{name: "surveys", key: "surveys", usage: "comma-separated survey ids to sync (surveys)"},
	{name: "clickhouse-addr", key: "clickhouse.addr", usage: "comma-separated ClickHouse host:port list; empty writes Parquet files (clickhouse.addr)"},
	{name: "parquet-dir", key: "parquet.dir", usage: "directory of the Parquet sink (parquet.dir)"},
	{name: "webhooks-listen", key: "webhooks.listen", usage: "host:port of the webhook receiver (webhooks.listen)"},
	{name: "metrics-listen", key: "metrics.listen", usage: "host:port of the Prometheus endpoint; empty disables it (metrics.listen)"},
	{name: "log-level", key: "log.level", usage: "debug, info, warn or error (log.level)"},
	{name: "log-format", key: "log.format", usage: "text or json (log.format)"},
}

// RegisterFlags defines the configuration flags on fs: --set key=value
// (repeatable; overrides any key, lists comma-separated) and a few named
// shortcuts (--demo, --api-base-url, --surveys, --clickhouse-addr,
// --parquet-dir, --webhooks-listen, --metrics-listen, --log-level,
// --log-format). Load applies the ones given on the command line: named
// flags first, then each --set in order. Secrets have no named flag (a
// command line is visible to every user of the machine); set them in the
// file or the environment.
func RegisterFlags(fs *pflag.FlagSet) {
	RegisterSomeFlags(fs)
}

// RegisterSomeFlags is RegisterFlags with only the named flags given (by
// flag name, e.g. "parquet-dir") besides --set; all of them when none is.
func RegisterSomeFlags(fs *pflag.FlagSet, names ...string) {
	for _, f := range namedFlags {
		if len(names) > 0 && !slices.Contains(names, f.name) {
			continue
		}
		if f.isBool {
			fs.Bool(f.name, false, f.usage)
		} else {
			fs.String(f.name, "", f.usage)
		}
	}
	fs.StringArray(SetFlag, nil, "override a configuration key, e.g. --set sync.poll_interval=1m (repeatable; lists are comma-separated)")
}

// Load builds the configuration from its layers, each overriding the one
// before: the defaults in code; the YAML file at path (none when path is
// ""); the SURVEYSYNC_* variables of env (os.Environ() form, "NAME=value");
// the flags of fs that RegisterFlags defined and the command line set (fs
// may be nil). It then fills derived values and validates the result.
//
// Every problem is reported at once, joined (errors.Join): unknown keys,
// values of the wrong type, and Validate's findings. Each names the key
// and, for the first two, where it came from. Secret values never appear.
//
// The demo rule: with no file, no api.token, no api.base_url and no
// demo.emulator.enabled set anywhere, demo.emulator.enabled becomes true, so
// that `surveysync run` with no configuration runs the demo.
func Load(path string, env []string, fs *pflag.FlagSet) (*Config, error) {
	c, _, err := LoadWarnings(path, env, fs)
	return c, err
}

// LoadWarnings is Load that also returns warnings: SURVEYSYNC_* variables
// that set no configuration key and are ignored.
func LoadWarnings(path string, env []string, fs *pflag.FlagSet, opts ...LoadOption) (*Config, []string, error) {
	var lo loadOptions
	for _, o := range opts {
		o(&lo)
	}
	k := koanf.New(".")
	if err := k.Load(confmap.Provider(defaultsMap(), ""), nil); err != nil {
		return nil, nil, fmt.Errorf("config defaults: %w", err)
	}
	// sources maps each key path set by a file, variable or flag to where
	// it was set ("surveysync.yaml:12", "environment variable …"), for the
	// messages and the demo rule.
	sources := map[string]string{}
	var errs []error

	if path != "" {
		fk := koanf.New(".")
		if err := fk.Load(file.Provider(path), yaml.Parser()); err != nil {
			return nil, nil, fmt.Errorf("config file %s: %w", path, err)
		}
		lines := fileLines(path)
		where := func(key string) string {
			if n, ok := lines[key]; ok {
				return fmt.Sprintf("%s:%d", path, n)
			}
			return path
		}
		errs = append(errs, checkValue(fk.Raw(), configType, "", where)...)
		for key := range lines {
			sources[key] = where(key)
		}
		if err := k.Merge(fk); err != nil {
			return nil, nil, fmt.Errorf("config file %s: %w", path, err)
		}
	}

	envs, warnings, envErrs := envEntries(env)
	errs = append(errs, envErrs...)
	errs = append(errs, applyEntries(k, envs, sources)...)
	errs = append(errs, applyEntries(k, flagEntries(fs), sources)...)
	if len(errs) > 0 {
		return nil, warnings, errors.Join(errs...)
	}

	c := &Config{}
	if err := decode(k, c); err != nil {
		return nil, warnings, err
	}
	_, baseURLSet := sources["api.base_url"]
	_, demoSet := sources["demo.emulator.enabled"]
	if path == "" && !c.API.Token.IsSet() && !baseURLSet && !demoSet {
		c.Demo.Emulator.Enabled = true
	}
	c.resolve()
	if probs := lo.filter(c.problems()); len(probs) > 0 {
		errs := make([]error, len(probs))
		for i, p := range probs {
			errs[i] = p.locate(sources)
		}
		return nil, warnings, errors.Join(errs...)
	}
	return c, warnings, nil
}

// LoadOption changes what LoadWarnings requires of a configuration.
type LoadOption func(*loadOptions)

type loadOptions struct {
	withoutAPI bool
}

// WithoutAPI is for the commands that never call the survey service
// (status, query, feed uncertain and resolve, copy-from): api.token and
// api.user_agent, which only the API client uses, are neither required nor
// checked, so an operator can run them without the daemon's secrets.
func WithoutAPI() LoadOption { return func(o *loadOptions) { o.withoutAPI = true } }

// apiOnly are the keys only the API client reads.
var apiOnly = []string{"api.token", "api.user_agent"}

func (o loadOptions) filter(probs problems) problems {
	if !o.withoutAPI {
		return probs
	}
	out := probs[:0]
	for _, p := range probs {
		if !slices.Contains(apiOnly, p.path) {
			out = append(out, p)
		}
	}
	return out
}

// fileLines maps every key path of a YAML file to its line.
func fileLines(path string) map[string]int {
	lines := map[string]int{}
	if b, err := os.ReadFile(path); err == nil {
		var doc yaml3.Node
		if yaml3.Unmarshal(b, &doc) == nil && len(doc.Content) == 1 {
			indexLines(doc.Content[0], "", lines)
		}
	}
	return lines
}

// indexLines records the line of every key under n, by key path.
func indexLines(n *yaml3.Node, path string, lines map[string]int) {
	switch n.Kind {
	case yaml3.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			p := join(path, n.Content[i].Value)
			lines[p] = n.Content[i].Line
			indexLines(n.Content[i+1], p, lines)
		}
	case yaml3.SequenceNode:
		for i, item := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			lines[p] = item.Line
			indexLines(item, p, lines)
		}
	}
}

// decode turns the merged map into c. The map has been checked against the
// schema already, so an error here is a bug in this package, not a user
// mistake; it is reported anyway, without values.
func decode(k *koanf.Koanf, c *Config) error {
	dc := &mapstructure.DecoderConfig{
		DecodeHook:  decodeHook,
		ErrorUnused: true,
		TagName:     "koanf",
	}
	if err := k.UnmarshalWithConf("", c, koanf.UnmarshalConf{DecoderConfig: dc}); err != nil {
		return fmt.Errorf("config: decoding the merged configuration: %w", err)
	}
	return nil
}

var (
	configType   = reflect.TypeOf(Config{})
	durationType = reflect.TypeOf(time.Duration(0))
	byteSizeType = reflect.TypeOf(ByteSize(0))
	timeType     = reflect.TypeOf(time.Time{})
	secretType   = reflect.TypeOf(Secret(""))
	pathType     = reflect.TypeOf(SecretPath(""))
)

// isSecret reports whether values of t must never appear in a message.
func isSecret(t reflect.Type) bool { return t == secretType || t == pathType }

func decodeHook(from, to reflect.Type, data any) (any, error) {
	s, isString := data.(string)
	switch to {
	case durationType:
		if isString {
			return parseDuration(s)
		}
	case byteSizeType:
		if isString {
			return ParseByteSize(s)
		}
	case timeType:
		if isString {
			return parseDate(s)
		}
	}
	return data, nil
}

// entry is one key set by an environment variable or a flag.
type entry struct {
	key    string // dotted, as written: "feeds.0.http.token"
	value  string
	origin string // "environment variable SURVEYSYNC_…", "flag --set"
	env    bool   // suggest keys as variable names
}

// envEntries picks the configuration variables out of env. A SURVEYSYNC_
// variable whose first part names no configuration section and has no
// double underscore is not a configuration key: when it would name one with
// its single underscores turned into double ones (SURVEYSYNC_API_TOKEN) it
// is an error naming the right variable; when it looks like a typo of a
// section, an error too; otherwise it is ignored with a warning, except the
// test and benchmark harness's own variables (SURVEYSYNC_TEST_*,
// SURVEYSYNC_BENCH_*).
func envEntries(env []string) ([]entry, []string, []error) {
	byName := map[string]string{}
	for _, kv := range env {
		name, val, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(name, EnvPrefix) || len(name) == len(EnvPrefix) {
			continue
		}
		byName[name] = val
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	sort.Strings(names)

	var out []entry
	var warnings []string
	var errs []error
	for _, name := range names {
		rest := strings.TrimPrefix(name, EnvPrefix)
		key := strings.ToLower(strings.ReplaceAll(rest, "__", "."))
		first, _, _ := strings.Cut(key, ".")
		if _, ok := fieldByTag(configType, first); !ok {
			if !strings.Contains(rest, "__") {
				if guess := guessKey(configType, strings.ToLower(rest)); guess != "" && strings.Contains(guess, ".") {
					errs = append(errs, fmt.Errorf("environment variable %s sets nothing: levels of a key are separated by a double underscore (did you mean %s?)", name, envName(guess)))
					continue
				}
			}
			s := Suggest(first, tagsOf(configType))
			if !strings.Contains(rest, "__") && s == "" {
				if !strings.HasPrefix(rest, "TEST_") && !strings.HasPrefix(rest, "BENCH_") {
					warnings = append(warnings, fmt.Sprintf("environment variable %s is not a configuration key; ignored (keys are SURVEYSYNC_<SECTION>__<KEY>, e.g. SURVEYSYNC_API__TOKEN)", name))
				}
				continue
			}
			msg := fmt.Sprintf("unknown key %q in environment variable %s", key, name)
			if s != "" {
				msg += fmt.Sprintf(" (did you mean %s?)", envName(s+strings.TrimPrefix(key, first)))
			}
			errs = append(errs, errors.New(msg))
			continue
		}
		out = append(out, entry{key: key, value: byName[name], origin: "environment variable " + name, env: true})
	}
	return out, warnings, errs
}

// guessKey reads s, a key written with single underscores between levels
// ("api_token", "feeds_1_http_token"), against type t and returns the
// dotted key it names ("api.token"), or "" when it names none.
func guessKey(t reflect.Type, s string) string {
	switch {
	case isStructList(t):
		digits, rest, _ := strings.Cut(s, "_")
		if _, err := strconv.Atoi(digits); err != nil || rest == "" {
			return ""
		}
		if g := guessKey(t.Elem(), rest); g != "" {
			return digits + "." + g
		}
		return ""
	case t.Kind() == reflect.Struct && t != timeType:
		for i := 0; i < t.NumField(); i++ {
			tag := tagOf(t.Field(i))
			if s == tag {
				if ft := t.Field(i).Type; (ft.Kind() == reflect.Struct && ft != timeType) || isStructList(ft) {
					return "" // a section, not a key
				}
				return tag
			}
			if rest, ok := strings.CutPrefix(s, tag+"_"); ok {
				if g := guessKey(t.Field(i).Type, rest); g != "" {
					return tag + "." + g
				}
			}
		}
	}
	return ""
}

// envName is the variable that sets a dotted key.
func envName(key string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(key, ".", "__"))
}

// flagEntries lists the flags of fs the command line set.
func flagEntries(fs *pflag.FlagSet) []entry {
	if fs == nil {
		return nil
	}
	var out []entry
	for _, f := range namedFlags {
		fl := fs.Lookup(f.name)
		if fl == nil || !fl.Changed {
			continue
		}
		out = append(out, entry{key: f.key, value: fl.Value.String(), origin: "flag --" + f.name})
	}
	if fl := fs.Lookup(SetFlag); fl != nil && fl.Changed {
		vals, err := fs.GetStringArray(SetFlag)
		if err != nil {
			vals = nil
		}
		for _, kv := range vals {
			key, val, _ := strings.Cut(kv, "=")
			key = strings.TrimSpace(key)
			// Messages name list elements feeds[1].http.token: accept that
			// form as well as feeds.1.http.token.
			key = strings.NewReplacer("[", ".", "]", "").Replace(key)
			out = append(out, entry{key: key, value: val, origin: "flag --set " + key})
		}
	}
	return out
}

// applyEntries checks each entry against the schema, converts its value to
// the key's type and sets it in k, in order. Keys inside the feeds list
// (feeds.0.name) change an element the file defined.
func applyEntries(k *koanf.Koanf, entries []entry, sources map[string]string) []error {
	var errs []error
	for _, e := range entries {
		segs := strings.Split(e.key, ".")
		leaf, path, err := resolveKey(segs, e)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		val, err := fromString(leaf, e.value)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s in %s: %s", path, e.origin, hideIfSecret(leaf, err))) //nolint:errorlint // a secret's parse error is replaced, not wrapped
			continue
		}
		if j := structListAt(segs); j >= 0 {
			if err := setInList(k, segs, j, val); err != nil {
				errs = append(errs, fmt.Errorf("%s in %s: %w", path, e.origin, err))
				continue
			}
		} else if err := k.Set(e.key, val); err != nil {
			errs = append(errs, fmt.Errorf("%s in %s: %w", path, e.origin, err))
			continue
		}
		sources[path] = e.origin
	}
	return errs
}

// structListAt returns the index in segs of the first list of sections
// the key passes through (feeds in feeds.0.name, privacy.questions in
// privacy.questions.0.action), or -1.
func structListAt(segs []string) int {
	t := configType
	for j, seg := range segs[:len(segs)-1] {
		if t.Kind() != reflect.Struct || t == timeType {
			return -1
		}
		ft, ok := fieldByTag(t, seg)
		if !ok {
			return -1
		}
		if isStructList(ft) {
			return j
		}
		t = ft
	}
	return -1
}

// setInList sets segs[j+2:] inside element segs[j+1] of the list at
// segs[:j+1].
func setInList(k *koanf.Koanf, segs []string, j int, val any) error {
	name := strings.Join(segs[:j+1], ".")
	list, _ := k.Get(name).([]any)
	i, _ := strconv.Atoi(segs[j+1])
	if i >= len(list) {
		return fmt.Errorf("there is no %s[%d]: the configuration file defines %d (the environment and flags can change a list element, not add one)", name, i, len(list))
	}
	elem, ok := list[i].(map[string]any)
	if !ok {
		return fmt.Errorf("%s[%d] is not a mapping", name, i)
	}
	m := elem
	for _, s := range segs[j+2 : len(segs)-1] {
		next, ok := m[s].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[s] = next
		}
		m = next
	}
	m[segs[len(segs)-1]] = val
	return k.Set(name, list)
}

// resolveKey walks segs through the Config type and returns the type of
// the value it names and its display path ("feeds[0].http.token").
func resolveKey(segs []string, e entry) (reflect.Type, string, error) {
	t := configType
	path := ""
	for _, seg := range segs {
		switch {
		case t.Kind() == reflect.Struct && t != timeType:
			ft, ok := fieldByTag(t, seg)
			if !ok {
				return nil, "", unknownKey(join(path, seg), e.origin, suggestPath(path, seg, t), e.env)
			}
			t, path = ft, join(path, seg)
		case isStructList(t):
			n, err := strconv.Atoi(seg)
			if err != nil || n < 0 {
				return nil, "", fmt.Errorf("%s in %s: want a list index after %s (e.g. %s), got %q", path, e.origin, path, keyName(path+".0."+firstTag(t.Elem()), e.env), seg)
			}
			t, path = t.Elem(), fmt.Sprintf("%s[%d]", path, n)
		case t.Kind() == reflect.Map:
			t, path = t.Elem(), join(path, seg)
		default:
			return nil, "", fmt.Errorf("unknown key %q in %s: %s is a value, not a section", strings.Join(segs, "."), e.origin, path)
		}
	}
	if t.Kind() == reflect.Struct && t != timeType || isStructList(t) || t.Kind() == reflect.Map {
		return nil, "", fmt.Errorf("%s in %s: %s is a section; set its keys one by one (e.g. %s)", path, e.origin, path, keyName(e.key+"."+firstTag(t), e.env))
	}
	return t, path, nil
}

func keyName(key string, env bool) string {
	if env {
		return envName(key)
	}
	return key
}

// firstTag is an example of what may follow a section of type t in a key.
func firstTag(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Slice:
		return "0"
	case reflect.Map:
		return "<name>"
	case reflect.Struct:
		return tagOf(t.Field(0))
	}
	return ""
}

func unknownKey(key, origin, suggestion string, env bool) error {
	if why, ok := unsupportedStoreKey(key); ok {
		return fmt.Errorf("%s in %s: %s", key, origin, why)
	}
	msg := fmt.Sprintf("unknown key %q in %s", key, origin)
	if suggestion != "" {
		if env {
			msg += fmt.Sprintf(" (did you mean %s?)", envName(strings.NewReplacer("[", ".", "]", "").Replace(suggestion)))
		} else {
			msg += fmt.Sprintf(" (did you mean %s?)", suggestion)
		}
	}
	return errors.New(msg)
}

// fromString converts an environment or flag value to the type of its key.
// Durations, sizes and dates stay strings (checked here, converted by the
// decode hook); lists are comma-separated.
func fromString(t reflect.Type, s string) (any, error) {
	switch t {
	case durationType:
		_, err := parseDuration(s)
		return s, err
	case byteSizeType:
		_, err := ParseByteSize(s)
		return s, err
	case timeType:
		_, err := parseDate(s)
		return s, err
	}
	switch t.Kind() {
	case reflect.Pointer: // an optional value: unset is nil
		return fromString(t.Elem(), s)
	case reflect.String:
		return s, nil
	case reflect.Bool:
		b, err := strconv.ParseBool(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("want true or false, got %q", s)
		}
		return b, nil
	case reflect.Int, reflect.Int64:
		n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("want an integer, got %q", s)
		}
		return n, nil
	case reflect.Float64:
		f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil {
			return nil, fmt.Errorf("want a number, got %q", s)
		}
		return f, nil
	case reflect.Slice:
		out := []any{}
		for _, part := range strings.Split(s, ",") {
			part = strings.TrimSpace(part)
			if part == "" {
				continue
			}
			v, err := fromString(t.Elem(), part)
			if err != nil {
				return nil, fmt.Errorf("list item: %w", err)
			}
			out = append(out, v)
		}
		return out, nil
	}
	return nil, fmt.Errorf("cannot be set from a string")
}

// hideIfSecret replaces an error about a secret's value with one that does
// not quote it.
func hideIfSecret(t reflect.Type, err error) error {
	if isSecret(t) {
		return errors.New("invalid value (hidden)")
	}
	return err
}

// checkValue checks a decoded YAML value v against type t: unknown keys,
// wrong types. where names the place a key path came from
// ("surveysync.yaml:12").
func checkValue(v any, t reflect.Type, path string, where func(path string) string) []error {
	origin := where(path)
	if v == nil {
		return nil // an empty value means the zero value
	}
	bad := func(want string) []error {
		return []error{fmt.Errorf("%s in %s: want %s, got %s", path, origin, want, describe(v, isSecret(t)))}
	}
	switch t {
	case durationType:
		s, ok := v.(string)
		if !ok {
			return bad(`a duration such as "30s", "5m" or "72h"`)
		}
		if _, err := parseDuration(s); err != nil {
			return []error{fmt.Errorf("%s in %s: %w", path, origin, err)}
		}
		return nil
	case byteSizeType:
		switch x := v.(type) {
		case string:
			if _, err := ParseByteSize(x); err != nil {
				return []error{fmt.Errorf("%s in %s: %w", path, origin, err)}
			}
			return nil
		case int, int64, uint64:
			if n, ok := asInt(x); ok && n >= 0 {
				return nil
			}
		}
		return bad(`a byte size such as "16MiB" or a number of bytes`)
	case timeType:
		switch x := v.(type) {
		case time.Time:
			return nil
		case string:
			if _, err := parseDate(x); err != nil {
				return []error{fmt.Errorf("%s in %s: %w", path, origin, err)}
			}
			return nil
		}
		return bad(`a date such as "2024-01-31"`)
	}

	switch t.Kind() {
	case reflect.Pointer: // an optional value: unset is nil
		return checkValue(v, t.Elem(), path, where)
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			return bad("a mapping of keys")
		}
		var errs []error
		for _, key := range sortedKeys(m) {
			ft, ok := fieldByTag(t, key)
			if !ok && strings.Contains(key, ".") {
				errs = append(errs, fmt.Errorf("unknown key %q in %s: write nested keys, not dotted ones (%s: {%s: …})",
					join(path, key), where(join(path, key)), strings.SplitN(key, ".", 2)[0], strings.SplitN(key, ".", 2)[1]))
				continue
			}
			if !ok {
				errs = append(errs, unknownKey(join(path, key), where(join(path, key)), suggestPath(path, key, t), false))
				continue
			}
			errs = append(errs, checkValue(m[key], ft, join(path, key), where)...)
		}
		return errs
	case reflect.Map:
		m, ok := v.(map[string]any)
		if !ok {
			return bad("a mapping")
		}
		var errs []error
		for _, key := range sortedKeys(m) {
			errs = append(errs, checkValue(m[key], t.Elem(), join(path, key), where)...)
		}
		return errs
	case reflect.Slice:
		l, ok := v.([]any)
		if !ok {
			if t.Elem().Kind() == reflect.Struct {
				return bad("a list of mappings")
			}
			return bad("a list (e.g. [a, b])")
		}
		var errs []error
		for i, item := range l {
			errs = append(errs, checkValue(item, t.Elem(), fmt.Sprintf("%s[%d]", path, i), where)...)
		}
		return errs
	case reflect.String:
		switch v.(type) {
		case string:
		case []any, map[string]any:
			return bad("a string")
		default:
			return bad("a string (quote it)")
		}
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			return bad("true or false")
		}
	case reflect.Int, reflect.Int64:
		if _, ok := asInt(v); !ok {
			return bad("an integer")
		}
	case reflect.Float64:
		switch v.(type) {
		case int, int64, uint64, float64:
		default:
			return bad("a number")
		}
	}
	return nil
}

func asInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int:
		return int64(x), true
	case int64:
		return x, true
	case uint64:
		if x <= 1<<63-1 {
			return int64(x), true
		}
	}
	return 0, false
}

// describe names the type of a YAML value, and the value unless secret.
func describe(v any, secret bool) string {
	var kind string
	switch v.(type) {
	case string:
		kind = "string"
	case bool:
		kind = "boolean"
	case int, int64, uint64:
		kind = "integer"
	case float64:
		kind = "number"
	case []any:
		return "a list"
	case map[string]any:
		return "a mapping"
	case time.Time:
		kind = "timestamp"
	default:
		return fmt.Sprintf("%T", v)
	}
	if secret {
		return kind + " (value hidden)"
	}
	if s, ok := v.(string); ok {
		return fmt.Sprintf("string %q", s)
	}
	return fmt.Sprintf("%s %v", kind, v)
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func tagOf(f reflect.StructField) string {
	tag, _, _ := strings.Cut(f.Tag.Get("koanf"), ",")
	return tag
}

func fieldByTag(t reflect.Type, tag string) (reflect.Type, bool) {
	if t.Kind() != reflect.Struct {
		return nil, false
	}
	for i := 0; i < t.NumField(); i++ {
		if tagOf(t.Field(i)) == tag {
			return t.Field(i).Type, true
		}
	}
	return nil, false
}

func tagsOf(t reflect.Type) []string {
	var out []string
	for i := 0; i < t.NumField(); i++ {
		out = append(out, tagOf(t.Field(i)))
	}
	return out
}

func isStructList(t reflect.Type) bool {
	return t != nil && t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct && t.Elem() != timeType
}

// suggestPath proposes the key meant by an unknown key under path: a
// sibling spelt alike, else a key of that name elsewhere in the tree
// ("token" → "api.token").
func suggestPath(path, key string, t reflect.Type) string {
	if s := Suggest(key, tagsOf(t)); s != "" {
		return join(path, s)
	}
	var found []string
	walkKeys(configType, "", func(p string) {
		if p == key || strings.HasSuffix(p, "."+key) {
			found = append(found, p)
		}
	})
	if len(found) == 1 {
		return found[0]
	}
	// Prefer the one key outside the feeds list ("token" → api.token).
	var top []string
	for _, f := range found {
		if !strings.Contains(f, "[]") {
			top = append(top, f)
		}
	}
	if len(top) == 1 {
		return top[0]
	}
	return ""
}

// walkKeys calls fn with the path of every key of t (list elements as
// name[]).
func walkKeys(t reflect.Type, path string, fn func(string)) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		p := join(path, tagOf(f))
		fn(p)
		ft := f.Type
		if isStructList(ft) {
			walkKeys(ft.Elem(), p+"[]", fn)
		} else if ft.Kind() == reflect.Struct && ft != timeType {
			walkKeys(ft, p, fn)
		}
	}
}

// Suggest returns the candidate closest to s by edit distance, if close
// enough to be a typo, else "". The CLI uses it for flags too.
func Suggest(s string, candidates []string) string {
	best, bestD := "", 1<<30
	for _, c := range candidates {
		if d := editDistance(s, c); d < bestD {
			best, bestD = c, d
		}
	}
	if bestD <= 2 || (bestD <= len(s)/3 && bestD <= 4) {
		return best
	}
	return ""
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
