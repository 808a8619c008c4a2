package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/apache/arrow/go/v17/arrow"

	"github.com/surveysync/surveysync/internal/permanent"
	"github.com/surveysync/surveysync/pipeline/flatten"
)

// uuidColumns are the Arrow string columns stored as ClickHouse UUID.
var uuidColumns = map[string]bool{"response_id": true}

// Write inserts a batch: the answers rows first, then the responses rows.
//
// The order matters after a crash between the two inserts. answers_current
// shows only the answers whose (response_id, _version) is the latest
// version in responses, so answers written without their responses row are
// invisible, and responses_current only shows a version once its answers
// are already there. Writing responses first would show, in that window, a
// new version with no answers at all.
//
// Retries belong to the caller: the pipeline retries a failed Write with
// backoff. Only with Options.MaxRetries > 0 (off by default) does the sink
// retry a transient insert failure itself, with a fresh batch. An error
// that retrying cannot fix (a value the column cannot take, a server
// exception about the data) is a permanent.Error: the pipeline does not
// retry it but isolates the responses that cause it. A retried or repeated
// write leaves the views unchanged: rows of the same _version are identical
// and collapse under ReplacingMergeTree (and the views never count them
// twice). Write returns nil only after ClickHouse acknowledged both inserts.
func (s *Sink) Write(ctx context.Context, b *flatten.Batch) error {
	if b == nil {
		return nil
	}
	if b.Answers != nil && b.Answers.NumRows() > 0 {
		if err := s.insertRecord(ctx, flatten.TableAnswers, b.Answers, flatten.AnswersSchema); err != nil {
			return err
		}
	}
	if b.Responses != nil && b.Responses.NumRows() > 0 {
		if err := s.insertRecord(ctx, flatten.TableResponses, b.Responses, flatten.ResponsesSchema); err != nil {
			return err
		}
	}
	return nil
}

// insertRecord inserts rec into table, retrying transient failures.
func (s *Sink) insertRecord(ctx context.Context, table string, rec arrow.Record, want *arrow.Schema) error {
	if !rec.Schema().Equal(want) {
		return fmt.Errorf("clickhouse: insert into %s: record schema does not match flatten's: %s", s.table(table), rec.Schema())
	}
	query := insertSQL(s.table(table), rec.Schema())
	rows := rec.NumRows()
	backoff := 200 * time.Millisecond
	for attempt := 0; ; attempt++ {
		start := time.Now()
		err := s.insertOnce(ctx, query, rec)
		s.metrics.insertDuration.WithLabelValues(table).Observe(time.Since(start).Seconds())
		if err == nil {
			s.metrics.rowsWritten.WithLabelValues(table).Add(float64(rows))
			s.metrics.batchRows.WithLabelValues(table).Observe(float64(rows))
			return nil
		}
		s.metrics.insertErrors.WithLabelValues(table).Inc()
		err = fmt.Errorf("clickhouse: insert %d rows into %s (attempt %d): %w", rows, s.table(table), attempt+1, err)
		if attempt >= s.opts.MaxRetries || !retryable(err) || ctx.Err() != nil {
			return err
		}
		wait := backoff/2 + rand.N(backoff)
		s.log.Warn("insert failed, retrying", "table", table, "rows", rows, "attempt", attempt+1, "wait", wait, "error", err)
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(wait):
		}
		backoff = min(backoff*2, 10*time.Second)
	}
}

// insertOnce prepares a fresh batch, appends rec column-wise and sends it.
func (s *Sink) insertOnce(ctx context.Context, query string, rec arrow.Record) error {
	batch, err := s.conn.PrepareBatch(s.insertCtx(ctx), query)
	if err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	defer batch.Close()
	if err := appendRecord(batch, rec, uuidColumns); err != nil {
		_ = batch.Abort()
		return permanent.New("bad_value", err)
	}
	if err := batch.Send(); err != nil {
		err = fmt.Errorf("send: %w", err)
		if dataException(err) {
			return permanent.New("insert_rejected", err)
		}
		return err
	}
	return nil
}

// dataException reports whether err is a server exception about the
// inserted values themselves: the same rows would fail again. Exceptions
// about the schema, permissions or the server's state are not: they are
// fixed by an operator, and the write must wait for that, not drop rows.
func dataException(err error) bool {
	var ex *ch.Exception
	if !errors.As(err, &ex) {
		return false
	}
	switch ex.Code {
	case 6, // CANNOT_PARSE_TEXT
		27,  // CANNOT_PARSE_INPUT_ASSERTION_FAILED
		38,  // CANNOT_PARSE_DATE
		41,  // CANNOT_PARSE_DATETIME
		53,  // TYPE_MISMATCH
		69,  // ARGUMENT_OUT_OF_BOUND
		70,  // CANNOT_CONVERT_TYPE
		72,  // CANNOT_PARSE_NUMBER
		117, // INCORRECT_DATA
		131, // TOO_LARGE_STRING_SIZE
		321: // VALUE_IS_OUT_OF_RANGE_OF_DATA_TYPE
		return true
	}
	return false
}

// insertCtx adds the settings every insert needs. Into a Distributed table
// (cluster mode), an insert returns only once the shards have the rows.
func (s *Sink) insertCtx(ctx context.Context) context.Context {
	if s.opts.Cluster != "" {
		return ch.Context(ctx, ch.WithSettings(ch.Settings{"insert_distributed_sync": 1}))
	}
	return ctx
}

// retryable reports whether an insert error may go away on retry: network
// errors and the server's transient conditions do; conversion errors and
// other server exceptions (schema, types) do not.
func retryable(err error) bool {
	if permanent.Is(err) {
		return false
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var ex *ch.Exception
	if errors.As(err, &ex) {
		switch ex.Code {
		case 159, // TIMEOUT_EXCEEDED
			164, // READONLY
			202, // TOO_MANY_SIMULTANEOUS_QUERIES
			209, // SOCKET_TIMEOUT
			210, // NETWORK_ERROR
			241, // MEMORY_LIMIT_EXCEEDED
			252, // TOO_MANY_PARTS
			242: // TABLE_IS_READ_ONLY
			return true
		}
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	// Broken connections surface as io errors or driver errors without a
	// type; treat unknown errors as transient.
	return true
}
