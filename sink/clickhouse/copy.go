package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/surveysync/surveysync/pipeline/flatten"
)

// CopySource is a surveysync database on another ClickHouse server, read
// by the target's servers with the remote() table function.
type CopySource struct {
	Addr     string // host:port of its native protocol, as the target's nodes reach it
	Database string
	Username string
	Password string // never logged nor put in errors
}

// CopyReport is one table's copy: rows read from the source, and the
// current rows (FINAL) on each side after the copy.
type CopyReport struct {
	Table      string
	Rows       uint64 // rows inserted (as read from the source)
	SourceKeys uint64 // distinct rows after collapsing versions, on the source
	TargetKeys uint64 // the same on the target, after the copy
	Took       time.Duration
}

// copiedTables are every table surveysync keeps, in an order that is safe
// when a copy stops half-way and is started again: the checkpoints
// (sync_state, sync_progress) last, so a daemon started on a half-copied
// target re-reads from the older watermarks instead of skipping responses.
// wide_columns keeps the wide views' column names as they were given.
var copiedTables = append([]string{flatten.TableAnswers, flatten.TableResponses, "surveys", "rejects",
	"uploaded_files", "pushed_contacts", "message_sends", "webhook_events", "wide_columns"}, "sync_progress", "sync_state")

// CopyFrom copies every table of a surveysync database on another server
// (typically the single node a deployment outgrew) into this Sink's
// database (typically on a cluster, where the rows go through the
// Distributed tables to their shards), table by table with
// INSERT … SELECT * FROM remote(…) run by the target's server. Open has
// created the target's tables; both sides must be at the same migrations
// (the columns are copied by position). The daemon must be stopped on both
// sides while it runs. Every row keeps its _version, so a copy run twice
// (after a failure) collapses to the same rows: the views count each
// response once. After each table, the distinct rows per sorting key
// (FINAL) of the two sides are compared; a difference is an error.
func (s *Sink) CopyFrom(ctx context.Context, src CopySource) ([]CopyReport, error) {
	if _, _, err := net.SplitHostPort(src.Addr); err != nil {
		return nil, fmt.Errorf("clickhouse: copy: source address %q: want host:port of the native protocol", src.Addr)
	}
	if !identRE.MatchString(src.Database) {
		return nil, fmt.Errorf("clickhouse: copy: source database %q: must match %s", src.Database, identRE)
	}
	if src.Username == "" {
		src.Username = "default"
	}
	if err := s.sameMigrations(ctx, src); err != nil {
		return nil, err
	}
	var out []CopyReport
	for _, table := range copiedTables {
		r, err := s.copyTable(ctx, src, table)
		if err != nil {
			return out, err
		}
		out = append(out, r)
		s.log.Info("table copied", "table", table, "rows", r.Rows, "current", r.TargetKeys, "took", r.Took.Round(time.Millisecond))
	}
	// The wide views survey_<id>, with the copied column names.
	if _, err := s.RefreshWideViews(ctx); err != nil {
		return out, fmt.Errorf("clickhouse: copy: create the wide views: %w", err)
	}
	return out, nil
}

// sameMigrations checks that the source's schema_migrations lists the
// target's migrations, no more and no fewer: the copy maps columns by
// position.
func (s *Sink) sameMigrations(ctx context.Context, src CopySource) error {
	ours, err := s.appliedMigrations(ctx)
	if err != nil {
		return err
	}
	rows, err := s.conn.Query(ctx, "SELECT DISTINCT version FROM "+src.remote("schema_migrations"))
	if err != nil {
		return fmt.Errorf("clickhouse: copy: read %s.schema_migrations on %s: %w", src.Database, src.Addr, src.redact(err))
	}
	defer rows.Close()
	theirs := map[int]bool{}
	for rows.Next() {
		var v uint32
		if err := rows.Scan(&v); err != nil {
			return err
		}
		theirs[int(v)] = true
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for v := range ours {
		if !theirs[v] {
			return fmt.Errorf("clickhouse: copy: the source %s.%s on %s lacks migration %d: run this surveysync version against it once (surveysync doctor with its config applies the migrations), then copy", src.Database, "schema_migrations", src.Addr, v)
		}
	}
	for v := range theirs {
		if !ours[v] {
			return fmt.Errorf("clickhouse: copy: the source has migration %d that this surveysync does not know: copy with the version that wrote it", v)
		}
	}
	return nil
}

// remote is the remote() table function reading table of the source.
func (src CopySource) remote(table string) string {
	return fmt.Sprintf("remote(%s, %s, %s, %s, %s)", quoteString(src.Addr), src.Database, table,
		quoteString(src.Username), quoteString(src.Password))
}

// redact removes the source's password from a server's message (the
// server may quote the query).
func (src CopySource) redact(err error) error {
	if err == nil || src.Password == "" {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), src.Password, "***"))
}

func (s *Sink) copyTable(ctx context.Context, src CopySource, table string) (CopyReport, error) {
	r := CopyReport{Table: table}
	remote, redact := src.remote(table), src.redact
	start := time.Now()
	if err := s.conn.QueryRow(ctx, "SELECT count() FROM "+remote).Scan(&r.Rows); err != nil {
		return r, fmt.Errorf("clickhouse: copy %s: read %s.%s on %s: %w", table, src.Database, table, src.Addr, redact(err))
	}
	if err := s.conn.Exec(s.insertCtx(ctx), fmt.Sprintf("INSERT INTO %s SELECT * FROM %s", s.table(table), remote)); err != nil {
		return r, fmt.Errorf("clickhouse: copy %s from %s.%s on %s: %w", table, src.Database, table, src.Addr, redact(err))
	}
	r.Took = time.Since(start)
	var err error
	if r.SourceKeys, err = s.countFinal(ctx, remote); err != nil {
		return r, fmt.Errorf("clickhouse: copy %s: count the source: %w", table, redact(err))
	}
	if r.TargetKeys, err = s.countFinal(ctx, s.table(table)); err != nil {
		return r, fmt.Errorf("clickhouse: copy %s: count the copy: %w", table, err)
	}
	if r.SourceKeys != r.TargetKeys {
		return r, fmt.Errorf("clickhouse: copy %s: the source has %d current rows, the copy %d", table, r.SourceKeys, r.TargetKeys)
	}
	return r, nil
}

// countFinal counts the rows of from (a table or a remote() call) once
// versions are collapsed (FINAL).
func (s *Sink) countFinal(ctx context.Context, from string) (uint64, error) {
	var n uint64
	err := s.conn.QueryRow(ctx, "SELECT count() FROM "+from+" FINAL").Scan(&n)
	return n, err
}
