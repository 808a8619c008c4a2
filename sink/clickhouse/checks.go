package clickhouse

import (
	"context"
	"errors"
	"fmt"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/surveysync/surveysync/internal/permanent"
	"github.com/surveysync/surveysync/pipeline/flatten"
	"github.com/surveysync/surveysync/sink/warehouse"
)

// writtenTables are the tables the daemon inserts into, besides responses
// and answers.
var writtenTables = []string{"rejects", "sync_state", "sync_progress", "surveys", "uploaded_files", "pushed_contacts", "message_sends", "webhook_events"}

// CheckWrites inserts zero rows into every table the daemon writes
// (surveysync doctor): the server answers an INSERT with the table's
// columns, so a missing table or column, missing grants and a read-only
// user show, and for responses and answers the empty columns are appended
// as the writer appends real ones, so a column whose type no longer takes
// what surveysync writes shows too. Nothing is stored.
func (s *Sink) CheckWrites(ctx context.Context) []warehouse.WriteCheck {
	var out []warehouse.WriteCheck
	for _, t := range []struct {
		name   string
		schema *arrow.Schema
	}{{flatten.TableResponses, flatten.ResponsesSchema}, {flatten.TableAnswers, flatten.AnswersSchema}} {
		rec := array.NewRecordBuilder(memory.DefaultAllocator, t.schema).NewRecordBatch()
		err := s.insertOnce(ctx, insertSQL(s.table(t.name), t.schema), rec)
		rec.Release()
		out = append(out, s.check(t.name, err))
	}
	for _, name := range writtenTables {
		out = append(out, s.check(name, s.insertNothing(ctx, s.table(name))))
	}
	return out
}

// insertNothing sends an INSERT of no rows into table.
func (s *Sink) insertNothing(ctx context.Context, table string) error {
	batch, err := s.conn.PrepareBatch(s.insertCtx(ctx), "INSERT INTO "+table)
	if err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	defer batch.Close()
	return batch.Send()
}

func (s *Sink) check(table string, err error) warehouse.WriteCheck {
	c := warehouse.WriteCheck{Table: s.table(table)}
	if err == nil {
		return c
	}
	we := s.writeError(table, err)
	c.Err = we
	c.Fix = s.RefusalFix(table, err)
	return c
}

// RefusalFix is the operator's next step for an insert into table that
// failed with err (surveysync doctor, docs/operations.md "The warehouse
// refuses writes").
func (s *Sink) RefusalFix(table string, err error) string {
	full := s.table(table)
	var ex *ch.Exception
	if !errors.As(err, &ex) {
		if permanent.Is(err) {
			return fmt.Sprintf("a column of %s no longer has the type surveysync writes (docs/schema.md): compare SHOW CREATE TABLE %s with the migration and ALTER the column back", full, full)
		}
		return "check that ClickHouse answers on clickhouse.addr (surveysync doctor's clickhouse line)"
	}
	switch ex.Code {
	case 60, 81: // UNKNOWN_TABLE, UNKNOWN_DATABASE
		return fmt.Sprintf("%s is missing: restore it (RENAME it back, or from a backup), or recreate it by deleting its migration's row from %s.schema_migrations and restarting surveysync (docs/operations.md)", full, s.opts.Database)
	case 8, 10, 16, 47: // THERE_IS_NO_COLUMN, NOT_FOUND_COLUMN_IN_BLOCK, NO_SUCH_COLUMN_IN_TABLE, UNKNOWN_IDENTIFIER
		return fmt.Sprintf("%s lacks a column surveysync writes (docs/schema.md): ALTER TABLE %s ADD COLUMN it back", full, full)
	case 43, 44, 53, 70: // ILLEGAL_TYPE_OF_ARGUMENT, ILLEGAL_COLUMN, TYPE_MISMATCH, CANNOT_CONVERT_TYPE
		return fmt.Sprintf("a column of %s, or on a cluster its sharding key, does not take the type surveysync writes: compare SHOW CREATE TABLE %s with docs/schema.md", full, full)
	case 164, 291, 497, 192, 193, 194, 195, 516: // READONLY, DATABASE_ACCESS_DENIED, ACCESS_DENIED, user/password/IP
		return fmt.Sprintf("give clickhouse.username INSERT on %s.* and a profile without readonly (users.xml, or GRANT INSERT ON %s.* on ClickHouse 20.5+)", s.opts.Database, s.opts.Database)
	case 243: // NOT_ENOUGH_SPACE
		return "free disk space on the ClickHouse server"
	}
	return "see the server's message; docs/operations.md, \"The warehouse refuses writes\""
}
