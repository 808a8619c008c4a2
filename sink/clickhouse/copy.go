package clickhouse

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"reflect"
	"strings"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/surveysync/surveysync/pipeline/flatten"
)

// CopySource is a surveysync database on another ClickHouse server, read
// over a connection of its own: the password goes in that connection's
// handshake, never into the text of a query (where it would land in the
// servers' query logs).
type CopySource struct {
	Addr     string // host:port of its native protocol, as this machine reaches it
	Database string
	Username string
	Password string // never logged nor put in errors
	Secure   bool   // TLS
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

// copyBatchRows is the most rows one INSERT of a copy carries.
const copyBatchRows = 100_000

// CopyFrom copies every table of a surveysync database on another server
// (typically the single node a deployment outgrew) into this Sink's
// database (typically on a cluster, where the rows go through the
// Distributed tables to their shards), table by table: surveysync reads
// each table from the source over a connection of its own (SELECT *) and
// inserts the rows into the target in batches of copyBatchRows, so the
// source's password is never in a query's text (ClickHouse 18.16 has no
// named collections; remote() would carry it). Open has created the
// target's tables; both sides must be at the same migrations. The daemon
// must be stopped on both sides while it runs. Every row keeps its
// _version, so a copy run twice (after a failure) collapses to the same
// rows: the views count each response once. After each table, the
// distinct rows per sorting key (FINAL) of the two sides are compared; a
// difference is an error. No error carries the source's password.
func (s *Sink) CopyFrom(ctx context.Context, src CopySource) (out []CopyReport, err error) {
	defer func() { err = src.redact(err) }()
	if _, _, err := net.SplitHostPort(src.Addr); err != nil {
		return nil, fmt.Errorf("clickhouse: copy: source address %q: want host:port of the native protocol", src.Addr)
	}
	if !identRE.MatchString(src.Database) {
		return nil, fmt.Errorf("clickhouse: copy: source database %q: must match %s", src.Database, identRE)
	}
	if src.Username == "" {
		src.Username = "default"
	}
	from, err := src.open(ctx, s.opts.DialTimeout)
	if err != nil {
		return nil, err
	}
	defer from.Close()
	if err := s.sameMigrations(ctx, from, src); err != nil {
		return nil, err
	}
	for _, table := range copiedTables {
		r, err := s.copyTable(ctx, from, src, table)
		if err != nil {
			return out, err
		}
		out = append(out, r)
		s.log.Info("table copied", "table", table, "rows", r.Rows, "current", r.TargetKeys, "took", r.Took.Round(time.Millisecond))
	}
	// The wide views survey_<id>, with the copied column names.
	if _, err := s.RefreshWideViews(ctx); err != nil {
		return out, fmt.Errorf("clickhouse: copy: create the wide views: %w (every table is copied; a wide_columns row named here came from the source %s: "+
			"delete it there too, or a next copy brings it back)", err, src.table("wide_columns"))
	}
	return out, nil
}

// open connects to the source and checks that it answers.
func (src CopySource) open(ctx context.Context, dialTimeout time.Duration) (driver.Conn, error) {
	o := &ch.Options{
		Addr:        []string{src.Addr},
		Auth:        ch.Auth{Username: src.Username, Password: src.Password},
		ClientInfo:  ch.ClientInfo{Products: []struct{ Name, Version string }{{Name: "surveysync-copy"}}},
		DialTimeout: dialTimeout,
	}
	if src.Secure {
		o.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	conn, err := ch.Open(o)
	if err != nil {
		return nil, fmt.Errorf("clickhouse: copy: open the source %s: %w", src.Addr, err)
	}
	if err := conn.Ping(ctx); err != nil {
		conn.Close()
		return nil, fmt.Errorf("clickhouse: copy: connect to the source %s as %s: %w (check the address, --from-user and SURVEYSYNC_COPY_FROM_PASSWORD)",
			src.Addr, src.Username, err)
	}
	return conn, nil
}

// sameMigrations checks that the source's schema_migrations lists the
// target's migrations, no more and no fewer: the copy maps columns by
// name, and both sides must have the same ones.
func (s *Sink) sameMigrations(ctx context.Context, from driver.Conn, src CopySource) error {
	ours, err := s.appliedMigrations(ctx)
	if err != nil {
		return err
	}
	rows, err := from.Query(ctx, "SELECT DISTINCT version FROM "+src.table("schema_migrations"))
	if err != nil {
		return fmt.Errorf("clickhouse: copy: read %s on %s: %w", src.table("schema_migrations"), src.Addr, err)
	}
	defer rows.Close()
	theirs := map[int]bool{}
	for rows.Next() {
		var v uint32
		if err := rows.Scan(&v); err != nil {
			return fmt.Errorf("clickhouse: copy: read %s on %s: %w", src.table("schema_migrations"), src.Addr, err)
		}
		theirs[int(v)] = true
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("clickhouse: copy: read %s on %s: %w", src.table("schema_migrations"), src.Addr, err)
	}
	for v := range ours {
		if !theirs[v] {
			return fmt.Errorf("clickhouse: copy: the source %s on %s lacks migration %d: run this surveysync version against it once (surveysync doctor with its config applies the migrations), then copy", src.table("schema_migrations"), src.Addr, v)
		}
	}
	for v := range theirs {
		if !ours[v] {
			return fmt.Errorf("clickhouse: copy: the source has migration %d that this surveysync does not know: copy with the version that wrote it", v)
		}
	}
	return nil
}

// table is the source's table name, qualified.
func (src CopySource) table(name string) string { return src.Database + "." + name }

// redact removes the source's password from an error's message (as it
// is, and as a quoted string would spell it): defence in depth, since no
// query carries it.
func (src CopySource) redact(err error) error {
	if err == nil || src.Password == "" {
		return err
	}
	msg := err.Error()
	red := strings.NewReplacer(src.Password, "***", strings.Trim(quoteString(src.Password), "'"), "***").Replace(msg)
	if red == msg {
		return err
	}
	return errors.New(red)
}

// copyTable streams table from the source into the target.
func (s *Sink) copyTable(ctx context.Context, from driver.Conn, src CopySource, table string) (CopyReport, error) {
	r := CopyReport{Table: table}
	start := time.Now()
	rows, err := from.Query(ctx, "SELECT * FROM "+src.table(table))
	if err != nil {
		return r, fmt.Errorf("clickhouse: copy %s: read %s on %s: %w", table, src.table(table), src.Addr, err)
	}
	defer rows.Close()
	names := rows.Columns()
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = quoteIdent(n)
	}
	insert := fmt.Sprintf("INSERT INTO %s (%s)", s.table(table), strings.Join(quoted, ", "))
	dest := make([]any, len(names))
	for i, t := range rows.ColumnTypes() {
		dest[i] = reflect.New(t.ScanType()).Interface()
	}
	vals := make([]any, len(dest))
	insertErr := func(err error) error {
		return fmt.Errorf("clickhouse: copy %s from %s on %s: insert into %s: %w", table, src.table(table), src.Addr, s.table(table), err)
	}
	var batch driver.Batch
	defer func() {
		if batch != nil {
			_ = batch.Abort()
		}
	}()
	inBatch := 0
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return r, fmt.Errorf("clickhouse: copy %s: read %s on %s: %w", table, src.table(table), src.Addr, err)
		}
		for i, d := range dest {
			vals[i] = reflect.ValueOf(d).Elem().Interface()
		}
		if batch == nil {
			if batch, err = s.conn.PrepareBatch(s.insertCtx(ctx), insert); err != nil {
				batch = nil
				return r, insertErr(err)
			}
		}
		if err := batch.Append(vals...); err != nil {
			return r, insertErr(err)
		}
		r.Rows++
		if inBatch++; inBatch == copyBatchRows {
			err := batch.Send()
			batch, inBatch = nil, 0
			if err != nil {
				return r, insertErr(err)
			}
		}
	}
	if err := rows.Err(); err != nil {
		return r, fmt.Errorf("clickhouse: copy %s: read %s on %s: %w", table, src.table(table), src.Addr, err)
	}
	if batch != nil {
		err := batch.Send()
		batch = nil
		if err != nil {
			return r, insertErr(err)
		}
	}
	r.Took = time.Since(start)
	if r.SourceKeys, err = countFinal(ctx, from, src.table(table)); err != nil {
		return r, fmt.Errorf("clickhouse: copy %s: count the source's current rows: %w", table, err)
	}
	if r.TargetKeys, err = countFinal(ctx, s.conn, s.table(table)); err != nil {
		return r, fmt.Errorf("clickhouse: copy %s: count the copy's current rows: %w", table, err)
	}
	if r.SourceKeys != r.TargetKeys {
		return r, fmt.Errorf("clickhouse: copy %s: the source has %d current rows, the copy %d: the target database held rows the source lacks "+
			"(copy into a new, empty database) or the source changed during the copy (stop its daemon, then run the same command again)", table, r.SourceKeys, r.TargetKeys)
	}
	return r, nil
}

// countFinal counts the rows of table on conn once versions are collapsed
// (FINAL).
func countFinal(ctx context.Context, conn driver.Conn, table string) (uint64, error) {
	var n uint64
	err := conn.QueryRow(ctx, "SELECT count() FROM "+table+" FINAL").Scan(&n)
	return n, err
}
