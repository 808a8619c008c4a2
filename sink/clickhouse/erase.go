package clickhouse

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/survey"
)

// Erasure in ClickHouse (issue 23, docs/privacy.md):
//
//   - The audit rows and tombstones are table erasures (migration 0075).
//   - Rows are removed with ALTER TABLE … DELETE mutations, one per table
//     for a whole slice of responses, on servers before 23.3, and with
//     lightweight DELETE FROM from 23.3 on (the rows vanish from reads at
//     once; the parts are rewritten by merges). A mutation is asynchronous:
//     EraseRows waits until no row of the responses is left in the table.
//   - On a cluster the statements go to the _local tables ON CLUSTER. On a
//     replicated cluster of a server before 19.1 (18.16 has been seen to
//     crash on mutations of replicated tables) EraseRows refuses, naming
//     the statements to run by hand at a quiet time.
//
// A mutation rewrites every part holding a matching row; the parts it
// replaced stay on disk, inactive, until the server removes them:
// old_parts_lifetime (480 s by default) after the mutation, measured in
// docs/benchmarks.md.

// eraseTables are the tables holding rows of a response, in the order they
// are erased: dependants first, the response row last, so that a run
// killed midway still shows the response (its tombstone makes the next run
// finish it).
var eraseTables = []struct {
	name, idExpr string
	str          bool // the column is a String: compared with lowercase text
}{
	{"answers", "response_id", false},
	{"uploaded_files", "response_id", false},
	{"webhook_events", "toString(response_id)", true}, // Nullable(UUID): 18.16 cannot compare it with UUID literals
	{"rejects", "lower(response_id)", true},
	{"responses", "response_id", false},
}

// Eraser returns s: ClickHouse erases physically.
func (s *Sink) Eraser() warehouse.Eraser { return s }

// RecordErasures writes audit rows into table erasures (one insert).
func (s *Sink) RecordErasures(ctx context.Context, es []warehouse.Erasure) error {
	if len(es) == 0 {
		return nil
	}
	table := s.table("erasures")
	batch, err := s.conn.PrepareBatch(s.insertCtx(ctx), "INSERT INTO "+table+
		" (survey_id, response_id, reason, state, requested_at, completed_at, erased, _version)")
	if err != nil {
		return fmt.Errorf("clickhouse: write erasures into %s: %w", table, err)
	}
	defer batch.Close()
	for _, e := range es {
		u, err := uuid.Parse(string(e.ResponseID))
		if err != nil {
			return fmt.Errorf("clickhouse: write erasures into %s: response id of survey %d is not a GUID", table, e.SurveyID)
		}
		completed := e.CompletedAt
		if completed.IsZero() {
			completed = time.Unix(0, 0)
		}
		if err := batch.Append(e.SurveyID, u, e.Reason, e.State, e.RequestedAt.UTC(), completed.UTC(), e.Erased, s.nextVersion()); err != nil {
			return fmt.Errorf("clickhouse: write erasures into %s: response %s: %w", table, u, err)
		}
	}
	if err := batch.Send(); err != nil {
		return fmt.Errorf("clickhouse: write erasures into %s: %w", table, err)
	}
	return nil
}

// Erasures reads the latest audit row of every erased response.
func (s *Sink) Erasures(ctx context.Context) ([]warehouse.Erasure, error) {
	table := s.table("erasures")
	// The latest version of each response's row by argMax, not FINAL:
	// ClickHouse 18.16 fails a FINAL read of the Distributed table over
	// replicated ones ("Cannot find column _version in source stream").
	rows, err := s.conn.Query(ctx, "SELECT survey_id, toString(response_id), argMax(reason, _version), argMax(state, _version),"+
		" argMax(requested_at, _version) AS requested, argMax(completed_at, _version), argMax(erased, _version) FROM "+
		table+" GROUP BY survey_id, response_id ORDER BY requested, survey_id, response_id")
	if err != nil {
		return nil, fmt.Errorf("clickhouse: read %s: %w", table, err)
	}
	defer rows.Close()
	var out []warehouse.Erasure
	for rows.Next() {
		var e warehouse.Erasure
		var id string
		if err := rows.Scan(&e.SurveyID, &id, &e.Reason, &e.State, &e.RequestedAt, &e.CompletedAt, &e.Erased); err != nil {
			return nil, fmt.Errorf("clickhouse: read %s: %w", table, err)
		}
		e.ResponseID = survey.GUID(id)
		if e.CompletedAt.Unix() <= 0 {
			e.CompletedAt = time.Time{}
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// lightweightDelete reports whether the server has DELETE FROM (23.3 on).
func (s *Sink) lightweightDelete() bool {
	v := s.version.Version
	return v.Major > 23 || (v.Major == 23 && v.Minor >= 3)
}

// mutationsRefused reports why this server layout refuses mutations, or "".
func (s *Sink) mutationsRefused() string {
	if s.opts.Cluster != "" && s.tmpl.Replicated && s.version.Version.Major < 19 {
		return fmt.Sprintf("ClickHouse %s has been seen to crash on mutations of replicated tables", s.ServerVersion())
	}
	return ""
}

// refusal is the error of a layout that refuses mutations (nil when it
// takes them): it names the statements to run by hand. Checked only when
// rows are left, so that surveysync erase, run again after them, finishes.
func (s *Sink) refusal(ids, strIDs string) error {
	why := s.mutationsRefused()
	if why == "" {
		return nil
	}
	return fmt.Errorf("clickhouse: erase refused on cluster %s: %s; run these at a quiet time (or after an upgrade), then surveysync erase again to finish: %s",
		s.opts.Cluster, why, strings.Join(s.eraseStatements(ids, strIDs), "; "))
}

// idList is "toUUID('…'), …" for keys (str: "'…', …", lowercase),
// parsed so that nothing but GUIDs reaches the SQL.
func idList(keys []warehouse.ResponseKey, str bool) (string, error) {
	var b strings.Builder
	for i, k := range keys {
		u, err := uuid.Parse(string(k.ResponseID))
		if err != nil {
			return "", fmt.Errorf("response id of survey %d is not a GUID", k.SurveyID)
		}
		if i > 0 {
			b.WriteString(", ")
		}
		if str {
			fmt.Fprintf(&b, "'%s'", u)
		} else {
			fmt.Fprintf(&b, "toUUID('%s')", u)
		}
	}
	return b.String(), nil
}

// eraseStatements are the statements EraseRows runs, one per table.
func (s *Sink) eraseStatements(ids, strIDs string) []string {
	return eraseSQL(s.tmpl, s.lightweightDelete(), ids, strIDs)
}

func eraseSQL(d tmplData, lightweight bool, ids, strIDs string) []string {
	var out []string
	for _, t := range eraseTables {
		name := d.Local(t.name)
		where := fmt.Sprintf("%s IN (%s)", t.idExpr, ids)
		if t.str {
			where = fmt.Sprintf("%s IN (%s)", t.idExpr, strIDs)
		}
		if lightweight {
			out = append(out, fmt.Sprintf("DELETE FROM %s%s WHERE %s", name, d.OnCluster, where))
		} else {
			out = append(out, fmt.Sprintf("ALTER TABLE %s%s DELETE WHERE %s", name, d.OnCluster, where))
		}
	}
	return out
}

// EraseSQL returns the statements that erase keys from database db on a
// single server, as EraseRows runs them: mutations (lightweight false, servers
// before 23.3) or lightweight DELETE. For the check on a current engine
// (chdbcheck).
func EraseSQL(db string, lightweight bool, keys []warehouse.ResponseKey) ([]string, error) {
	ids, err := idList(keys, false)
	if err != nil {
		return nil, err
	}
	strIDs, _ := idList(keys, true)
	return eraseSQL(newTmplData(db, "", false), lightweight, ids, strIDs), nil
}

// EraseRows removes every row of keys from answers, uploaded_files,
// webhook_events, rejects and responses, and returns the rows it found per
// table. Tables are erased one after another, each with one statement for
// all keys, and each is waited for until none of the rows is left.
func (s *Sink) EraseRows(ctx context.Context, keys []warehouse.ResponseKey) (map[string]int64, error) {
	if len(keys) == 0 {
		return map[string]int64{}, nil
	}
	ids, err := idList(keys, false)
	if err != nil {
		return nil, fmt.Errorf("clickhouse: erase: %w", err)
	}
	strIDs, _ := idList(keys, true)
	stmts := s.eraseStatements(ids, strIDs)
	found := map[string]int64{}
	for i, t := range eraseTables {
		ids := ids
		if t.str {
			ids = strIDs
		}
		n, err := s.countRows(ctx, t.name, t.idExpr, ids)
		if err != nil {
			return found, err
		}
		found[t.name] = n
		if n == 0 {
			continue // nothing to mutate (an 18.16 mutation would still rewrite every part)
		}
		if err := s.refusal(ids, strIDs); err != nil {
			return found, err
		}
		if err := s.execDDL(s.ddlCtx(ctx), stmts[i]); err != nil {
			return found, fmt.Errorf("clickhouse: erase %d responses from %s: %w", len(keys), s.table(t.name), err)
		}
		if err := s.waitGone(ctx, t.name, t.idExpr, ids, len(keys)); err != nil {
			return found, err
		}
	}
	return found, nil
}

// countRows counts the rows of the responses in table (every version).
func (s *Sink) countRows(ctx context.Context, table, idExpr, ids string) (int64, error) {
	var n uint64
	q := fmt.Sprintf("SELECT count() FROM %s WHERE %s IN (%s)", s.table(table), idExpr, ids)
	if err := s.conn.QueryRow(ctx, q).Scan(&n); err != nil {
		return 0, fmt.Errorf("clickhouse: erase: count rows in %s: %w", s.table(table), err)
	}
	return int64(n), nil
}

// waitGone polls table until no row of the responses is left: a mutation
// runs in the background after ALTER returns. It gives up when ctx ends, or
// when a mutation of the table failed (system.mutations' latest_fail_reason).
func (s *Sink) waitGone(ctx context.Context, table, idExpr, ids string, n int) error {
	wait := 50 * time.Millisecond
	for {
		left, err := s.countRows(ctx, table, idExpr, ids)
		if err != nil {
			return err
		}
		if left == 0 {
			return nil
		}
		if reason := s.mutationFailure(ctx, table); reason != "" {
			return fmt.Errorf("clickhouse: erase %d responses from %s: the mutation failed: %s", n, s.table(table), reason)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("clickhouse: erase %d responses from %s: %d rows still there: %w", n, s.table(table), left, ctx.Err())
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// mutationFailure is the failure reason of an unfinished mutation of table
// ("" when none failed, or the server cannot say).
func (s *Sink) mutationFailure(ctx context.Context, table string) string {
	q := fmt.Sprintf("SELECT latest_fail_reason FROM system.mutations WHERE database = '%s' AND table = '%s' AND is_done = 0 AND latest_fail_reason != '' LIMIT 1",
		s.opts.Database, localName(s.tmpl, table))
	var reason string
	if err := s.conn.QueryRow(ctx, q).Scan(&reason); err != nil {
		return ""
	}
	return reason
}

// localName is the unqualified name of table's storage table.
func localName(t tmplData, table string) string {
	n := t.Local(table)
	return n[strings.LastIndexByte(n, '.')+1:]
}

// ResponsesOfContact lists the responses whose rows name the contact, on
// any version.
func (s *Sink) ResponsesOfContact(ctx context.Context, contactID int64, hash string) ([]warehouse.ResponseKey, error) {
	where := fmt.Sprintf("contact_id = %d", contactID)
	if hash != "" {
		where = fmt.Sprintf("contact_id_hash = '%s'", hexOnly(hash))
	}
	q := fmt.Sprintf("SELECT DISTINCT survey_id, toString(response_id) FROM %s WHERE %s ORDER BY survey_id, response_id", s.table("responses"), where)
	rows, err := s.conn.Query(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("clickhouse: find the responses of a contact in %s: %w", s.table("responses"), err)
	}
	defer rows.Close()
	var out []warehouse.ResponseKey
	for rows.Next() {
		var k warehouse.ResponseKey
		var id string
		if err := rows.Scan(&k.SurveyID, &id); err != nil {
			return nil, fmt.Errorf("clickhouse: find the responses of a contact in %s: %w", s.table("responses"), err)
		}
		k.ResponseID = survey.GUID(id)
		out = append(out, k)
	}
	return out, rows.Err()
}

// EraseContact removes the contact's rows from pushed_contacts.
func (s *Sink) EraseContact(ctx context.Context, contactID int64, hash string) (int64, error) {
	where := fmt.Sprintf("contact_id = %d", contactID)
	if hash != "" {
		where = fmt.Sprintf("contact_id_hash = '%s'", hexOnly(hash))
	}
	table := s.table("pushed_contacts")
	var n uint64
	if err := s.conn.QueryRow(ctx, "SELECT count() FROM "+table+" WHERE "+where).Scan(&n); err != nil {
		return 0, fmt.Errorf("clickhouse: erase a contact from %s: %w", table, err)
	}
	if n == 0 {
		return 0, nil
	}
	if why := s.mutationsRefused(); why != "" {
		return 0, fmt.Errorf("clickhouse: erase a contact from %s refused on cluster %s: %s", table, s.opts.Cluster, why)
	}
	stmt := fmt.Sprintf("ALTER TABLE %s%s DELETE WHERE %s", s.tmpl.Local("pushed_contacts"), s.tmpl.OnCluster, where)
	if s.lightweightDelete() {
		stmt = fmt.Sprintf("DELETE FROM %s%s WHERE %s", s.tmpl.Local("pushed_contacts"), s.tmpl.OnCluster, where)
	}
	if err := s.execDDL(s.ddlCtx(ctx), stmt); err != nil {
		return 0, fmt.Errorf("clickhouse: erase a contact from %s: %w", table, err)
	}
	wait := 50 * time.Millisecond
	for {
		var left uint64
		if err := s.conn.QueryRow(ctx, "SELECT count() FROM "+table+" WHERE "+where).Scan(&left); err != nil {
			return 0, fmt.Errorf("clickhouse: erase a contact from %s: %w", table, err)
		}
		if left == 0 {
			return int64(n), nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("clickhouse: erase a contact from %s: %d rows still there: %w", table, left, ctx.Err())
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// hexOnly keeps the hex digits of a hash (it reaches SQL).
func hexOnly(h string) string {
	return strings.Map(func(r rune) rune {
		if (r >= '0' && r <= '9') || (r >= 'a' && r <= 'f') {
			return r
		}
		return -1
	}, strings.ToLower(h))
}
