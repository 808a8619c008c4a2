package clickhouse

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics of the sink; the labels are the table and, for errors, the
// server's exception code (both bounded).
type metrics struct {
	insertDuration *prometheus.HistogramVec
	rowsWritten    *prometheus.CounterVec
	insertErrors   *prometheus.CounterVec
	batchRows      *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		insertDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "surveysync_clickhouse_insert_duration_seconds",
			Help:    "Time to append and send one insert batch to ClickHouse (each attempt).",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"table"}),
		rowsWritten: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "surveysync_clickhouse_rows_written_total",
			Help: "Rows ClickHouse acknowledged, per table.",
		}, []string{"table"}),
		insertErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "surveysync_clickhouse_insert_errors_total",
			Help: "Failed insert attempts, per table and the server's exception code (none: network, timeout or a value the column cannot take); each retry counts.",
		}, []string{"table", "code"}),
		batchRows: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "surveysync_clickhouse_batch_rows",
			Help:    "Rows per insert batch, per table.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 11), // 1 … ~1M
		}, []string{"table"}),
	}
	var err error
	if m.insertDuration, err = register(reg, m.insertDuration); err != nil {
		return nil, err
	}
	if m.rowsWritten, err = register(reg, m.rowsWritten); err != nil {
		return nil, err
	}
	if m.insertErrors, err = register(reg, m.insertErrors); err != nil {
		return nil, err
	}
	if m.batchRows, err = register(reg, m.batchRows); err != nil {
		return nil, err
	}
	for _, t := range []string{"responses", "answers"} {
		m.insertErrors.WithLabelValues(t, "none") // exists before the first error, for rate() and alerts
	}
	return m, nil
}

// register registers c, or returns the identical collector already
// registered (two sinks on one registry share their metrics).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		return c, fmt.Errorf("clickhouse: register metrics: %w", err)
	}
	return c, nil
}
