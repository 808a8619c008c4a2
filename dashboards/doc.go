// Package dashboards holds the operator and analyst views of surveysync:
// Grafana dashboards as JSON (sync-health.json on Prometheus,
// survey-results.json on ClickHouse), their file-provisioning examples under
// provisioning/, and the Prometheus alert rules (alerts.yaml, unit-tested by
// alerts_test.yaml).
//
// The package has no Go API; its tests check the files against the real
// thing:
//
//   - dashboards_test.go: the JSON parses, data sources are template
//     variables (no hard-coded UIDs), every variable is defined, every metric
//     a query names is documented in docs/metrics.md; promtool check rules
//     and test rules.
//   - live_test.go: builds the daemon, runs it against its built-in emulator
//     with webhooks, files and a feed (and ClickHouse when
//     SURVEYSYNC_TEST_CLICKHOUSE_ADDR is set), lints /metrics with promlint,
//     compares it with docs/metrics.md both ways, starts Debian's prometheus
//     scraping it every second, and evaluates every PromQL expression of the
//     dashboards and alert rules through Prometheus's HTTP API.
//   - clickhouse_test.go: syncs the emulator into a fresh ClickHouse
//     database and runs every query of the Survey results dashboard, with
//     Grafana's variables and the ClickHouse data source's macros expanded
//     the way the plugin does, against the real server.
//   - scrape_test.go: the scrape cost with 100 surveys (docs/benchmarks.md).
//
// Tests skip when prometheus/promtool or ClickHouse are absent.
package dashboards
