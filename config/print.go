package config

import (
	"fmt"
	"io"
	"reflect"
	"sort"
	"strconv"
	"time"

	"go.yaml.in/yaml/v3"
)

// Print writes the effective configuration as YAML, every key in the order
// of the Config struct, with secrets masked ("***"; an unset secret prints
// ""), the secret segment of webhooks.path masked ("/hooks/***") and
// credentials in URLs masked. `surveysync config print` uses it; its output
// loads back (with the secrets to fill in).
func (c *Config) Print(w io.Writer) error { return c.print(w, true) }

func (c *Config) print(w io.Writer, mask bool) error {
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(toNode(reflect.ValueOf(*c), mask)); err != nil {
		return fmt.Errorf("config print: %w", err)
	}
	return enc.Close()
}

// defaultsMap is the bottom layer of Load, as a koanf map.
func defaultsMap() map[string]any {
	var m map[string]any
	if err := toNode(reflect.ValueOf(*defaults()), false).Decode(&m); err != nil {
		panic("config: defaults do not round-trip: " + err.Error()) // a bug in this package
	}
	return m
}

// valuer is implemented by Secret, SecretPath and URL.
type valuer interface {
	Value() string
	String() string
}

// toNode converts a configuration value to a YAML node; with mask, secrets
// are written masked.
func toNode(v reflect.Value, mask bool) *yaml.Node {
	str := func(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s} }
	if v.CanInterface() {
		switch x := v.Interface().(type) {
		case valuer:
			if mask {
				return str(x.String())
			}
			return str(x.Value())
		case time.Duration:
			return str(FormatDuration(x))
		case ByteSize:
			return str(x.String())
		case time.Time:
			return str(formatDate(x))
		}
	}
	switch v.Kind() {
	case reflect.Pointer: // an optional value: unset prints null
		if v.IsNil() {
			return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}
		}
		return toNode(v.Elem(), mask)
	case reflect.Struct:
		n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			n.Content = append(n.Content, str(tagOf(t.Field(i))), toNode(v.Field(i), mask))
		}
		return n
	case reflect.Map:
		n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		keys := make([]string, 0, v.Len())
		for _, k := range v.MapKeys() {
			keys = append(keys, k.String())
		}
		sort.Strings(keys)
		for _, k := range keys {
			n.Content = append(n.Content, str(k), toNode(v.MapIndex(reflect.ValueOf(k)), mask))
		}
		return n
	case reflect.Slice:
		n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		if v.Type().Elem().Kind() != reflect.Struct {
			n.Style = yaml.FlowStyle
		}
		for i := 0; i < v.Len(); i++ {
			n.Content = append(n.Content, toNode(v.Index(i), mask))
		}
		return n
	case reflect.String:
		return str(v.String())
	case reflect.Bool:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(v.Bool())}
	case reflect.Int, reflect.Int64:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatInt(v.Int(), 10)}
	case reflect.Float64:
		// No tag: 10 prints as 10, not !!float 10 (an integer loads into a float key).
		return &yaml.Node{Kind: yaml.ScalarNode, Value: strconv.FormatFloat(v.Float(), 'g', -1, 64)}
	}
	panic(fmt.Sprintf("config: no YAML form for %s", v.Type())) // a bug in this package
}
