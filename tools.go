//go:build tools

// This file pins the dependencies the packages use so that go.sum carries
// them from the first commit; it is never built.
package tools

import (
	_ "github.com/ClickHouse/clickhouse-go/v2"
	_ "github.com/apache/arrow-go/v18/arrow/array"
	_ "github.com/apache/arrow-go/v18/arrow/memory"
	_ "github.com/apache/arrow-go/v18/parquet/pqarrow"
	_ "github.com/google/go-cmp/cmp"
	_ "github.com/knadh/koanf/parsers/yaml"
	_ "github.com/knadh/koanf/providers/confmap"
	_ "github.com/knadh/koanf/providers/env"
	_ "github.com/knadh/koanf/providers/file"
	_ "github.com/knadh/koanf/providers/posflag"
	_ "github.com/knadh/koanf/v2"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "github.com/prometheus/client_golang/prometheus/testutil"
	_ "github.com/spf13/pflag"
	_ "go.uber.org/goleak"
	_ "golang.org/x/sync/errgroup"
	_ "golang.org/x/sync/singleflight"
	_ "golang.org/x/time/rate"
)
