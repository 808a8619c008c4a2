package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/apache/arrow-go/v18/arrow"

	"github.com/surveysync/surveysync/internal/permanent"
	"github.com/surveysync/surveysync/pipeline"
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
// Write makes one attempt: retries belong to the caller (the pipeline
// retries a failed Write with internal/backoff). An error that retrying
// cannot fix (a value the column cannot take, a server
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
	// The wide views' upkeep runs only when the batch changes what they
	// show (a new question, matrix row or "other" text; a survey not
	// looked at since the start): the check reads the batch, no query.
	if change := s.views.Seen(b.Responses, b.Answers); change != nil {
		s.views.Update(ctx, change)
	}
	return nil
}

// insertRecord inserts rec into table once: retries belong to the caller
// (the pipeline), which asks again after a transient failure.
func (s *Sink) insertRecord(ctx context.Context, table string, rec arrow.RecordBatch, want *arrow.Schema) error {
	if !rec.Schema().Equal(want) {
		return fmt.Errorf("clickhouse: insert into %s: record schema does not match flatten's: %s", s.table(table), rec.Schema())
	}
	rows := rec.NumRows()
	start := time.Now()
	err := s.insertOnce(ctx, insertSQL(s.table(table), rec.Schema()), rec)
	s.metrics.insertDuration.WithLabelValues(table).Observe(time.Since(start).Seconds())
	if err != nil {
		s.metrics.insertErrors.WithLabelValues(table, errorCode(err)).Inc()
		return s.writeError(table, fmt.Errorf("clickhouse: insert %d rows into %s: %w", rows, s.table(table), err))
	}
	s.metrics.rowsWritten.WithLabelValues(table).Add(float64(rows))
	s.metrics.batchRows.WithLabelValues(table).Observe(float64(rows))
	return nil
}

// insertBlockRows is the most rows of one block of an INSERT. A record is
// sent as one INSERT statement in blocks of this many rows, so the driver's
// columns and its encoding buffer hold one block, not the whole batch (a
// batch of 30,000 answers rows held three copies of itself: 50–100 MB at
// peak). The server squashes the blocks of one INSERT into one part (up to
// min_insert_block_size_rows, 1,048,576 by default), and an INSERT that
// fails midway writes none of them: a batch stays all or nothing.
const insertBlockRows = 4096

// maxEncodeBuffer is how many encoded bytes of a block the driver gathers
// before it writes them to the connection (clickhouse-go's
// MaxCompressionBuffer, 10 MiB by default; no compression is asked for, so
// it only bounds the buffer each connection keeps between queries).
const maxEncodeBuffer = 1 << 20

// insertOnce prepares a fresh batch, appends rec column-wise, one block at
// a time, and sends it.
func (s *Sink) insertOnce(ctx context.Context, query string, rec arrow.RecordBatch) error {
	batch, err := s.conn.PrepareBatch(s.insertCtx(ctx), query)
	if err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	defer batch.Close()
	rows := rec.NumRows()
	var cv conv
	for off := int64(0); off < rows || off == 0; off += insertBlockRows {
		block := rec
		if rows > insertBlockRows {
			block = rec.NewSlice(off, min(off+insertBlockRows, rows))
		}
		err := appendRecord(batch, block, uuidColumns, &cv)
		if block != rec {
			block.Release()
		}
		if err != nil {
			_ = batch.Abort()
			return permanent.New("bad_value", err)
		}
		if off+insertBlockRows >= rows {
			break
		}
		if err := batch.Flush(); err != nil {
			return fmt.Errorf("send block: %w", err)
		}
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
// (cluster mode), an insert returns only once the shards have the rows;
// with InsertQuorum, only once that many replicas of each shard have them.
func (s *Sink) insertCtx(ctx context.Context) context.Context {
	set := ch.Settings{}
	if s.opts.Cluster != "" {
		set["insert_distributed_sync"] = 1
	}
	if s.opts.InsertQuorum > 1 {
		set["insert_quorum"] = s.opts.InsertQuorum
	}
	if len(set) == 0 {
		return ctx
	}
	return ch.Context(ctx, ch.WithSettings(set))
}

// refused reports whether err is a server exception by which ClickHouse
// refuses the insert until an operator acts: every exception but the
// transient ones (transientException). The issue-17 example is code 43
// (ILLEGAL_TYPE_OF_ARGUMENT: a cluster's sharding key of the wrong type);
// others are 16/47 (no such column), 60/81 (unknown table or database),
// 164 (READONLY user), 497/291 (access denied: grants), 243 (NOT_ENOUGH_SPACE).
// Errors that are not exceptions (network, timeouts, a closed connection)
// are not refusals.
func refused(err error) bool {
	var ex *ch.Exception
	return errors.As(err, &ex) && !transientException(ex.Code)
}

// transientException reports whether an exception code is a condition of
// the server or the cluster that heals by itself.
func transientException(code int32) bool {
	switch code {
	case 3, // UNEXPECTED_END_OF_FILE
		23,  // CANNOT_READ_FROM_ISTREAM
		24,  // CANNOT_WRITE_TO_OSTREAM
		32,  // ATTEMPT_TO_READ_AFTER_EOF
		159, // TIMEOUT_EXCEEDED
		160, // TOO_SLOW
		173, // CANNOT_ALLOCATE_MEMORY
		202, // TOO_MANY_SIMULTANEOUS_QUERIES
		203, // NO_FREE_CONNECTION
		209, // SOCKET_TIMEOUT
		210, // NETWORK_ERROR
		225, // NO_ZOOKEEPER
		236, // ABORTED
		241, // MEMORY_LIMIT_EXCEEDED
		242, // TABLE_IS_READ_ONLY (a replica that lost its ZooKeeper session)
		252, // TOO_MANY_PARTS
		279, // ALL_CONNECTION_TRIES_FAILED
		285, // TOO_FEW_LIVE_REPLICAS
		286, // UNSATISFIED_QUORUM_FOR_PREVIOUS_WRITE
		319, // UNKNOWN_STATUS_OF_INSERT
		394, // QUERY_WAS_CANCELLED
		439, // CANNOT_SCHEDULE_TASK
		999: // KEEPER_EXCEPTION
		return true
	}
	return false
}

// errorCode is the code label of surveysync_clickhouse_insert_errors_total:
// the server's exception code, or "none" (network, timeout, conversion).
func errorCode(err error) string {
	var ex *ch.Exception
	if errors.As(err, &ex) {
		return strconv.Itoa(int(ex.Code))
	}
	return "none"
}

// writeError describes a failed insert into table for the pipeline: the
// table, the server's code and message, and whether the server refuses it
// (refused, or a permanent error: the rows cannot be converted). The
// password, should a message ever quote it, is masked.
func (s *Sink) writeError(table string, err error) error {
	we := &pipeline.WriteError{Table: table, Refused: refused(err) || permanent.Is(err)}
	var ex *ch.Exception
	if errors.As(err, &ex) {
		we.Code = int(ex.Code)
		we.Message = ex.Message
	} else {
		we.Message = err.Error()
	}
	if pw := s.opts.Password; pw != "" {
		we.Message = strings.ReplaceAll(we.Message, pw, "***")
		if strings.Contains(err.Error(), pw) {
			err = masked{err, pw}
		}
	}
	we.Err = err
	return we
}

// masked is err with a secret masked in its text.
type masked struct {
	err    error
	secret string
}

func (m masked) Error() string { return strings.ReplaceAll(m.err.Error(), m.secret, "***") }
func (m masked) Unwrap() error { return m.err }
