package clickhouse

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"

	"github.com/surveysync/surveysync/wide"
)

// Wide views (issue 21, docs/schema.md "Wide tables"): one view per survey,
// survey_<id>. Their upkeep (which columns, when to replace a view) and
// their SQL live in package wide (upkeep.go, viewsql.go); Write hands it
// each written batch (wide.Upkeep.Seen: no query), and it runs only when a
// survey's questions change. This file holds the storage operations it
// needs (wideStore: wide_columns, the answers' scan, the views' DDL).

// The column model and naming live in package wide (shared with the
// Parquet sink's export); these names keep sink/clickhouse's API.
const (
	KindLabel    = wide.KindLabel
	KindLabels   = wide.KindLabels
	KindNumber   = wide.KindNumber
	KindText     = wide.KindText
	KindFiles    = wide.KindFiles
	KindOther    = wide.KindOther
	KindValues   = wide.KindValues
	KindChoiceID = wide.KindChoiceID
)

// WideColumn is one column of a wide view (a row of wide_columns).
type WideColumn = wide.Column

// WideOptions choose the wide views' extras.
type WideOptions struct {
	// ChoiceIDs adds beside each label column (single choice, a matrix row
	// with one answer) a column <name>_id: the chosen option's id (the
	// matrix column's for a matrix row), NULL when unanswered.
	ChoiceIDs bool
	// Names gives surveys a second, friendly view name besides
	// survey_<id>: the same view under that name, kept current alike.
	Names map[int64]string
}

func (o WideOptions) check() error {
	seen := map[string]int64{}
	for id, name := range o.Names {
		if err := wide.CheckViewName(name); err != nil {
			return fmt.Errorf("clickhouse: options: survey %d: %w", id, err)
		}
		if other, ok := seen[name]; ok {
			return fmt.Errorf("clickhouse: options: surveys %d and %d both have wide view name %q", min(id, other), max(id, other), name)
		}
		seen[name] = id
	}
	return nil
}

// WideViewName is the name of survey id's wide view.
func WideViewName(surveyID int64) string { return wide.ViewName(surveyID) }

// quoteIdent quotes an identifier for every supported ClickHouse
// (wide.QuoteIdent: the wide views' SQL quotes their column names alike).
func quoteIdent(s string) string { return wide.QuoteIdent(s) }

// newViews is the upkeep of the wide views (Open makes it once the
// server's version is known: the view's SQL depends on it).
func (s *Sink) newViews() *wide.Upkeep {
	return wide.NewUpkeep(wideStore{s}, wide.UpkeepOptions{Database: s.opts.Database, Aliases: s.version.Version.Major >= 20,
		ChoiceIDs: s.opts.Wide.ChoiceIDs, Names: s.opts.Wide.Names, Log: s.log})
}

// wideStore is the storage the wide views' upkeep needs (wide.Store).
type wideStore struct{ s *Sink }

func (w wideStore) Columns(ctx context.Context, id int64) ([]WideColumn, error) {
	return w.s.WideColumns(ctx, id)
}

func (w wideStore) RecordColumns(ctx context.Context, cols []WideColumn) error {
	return w.s.writeWideColumns(ctx, cols)
}

func (w wideStore) ScanColumns(ctx context.Context, id int64) ([]WideColumn, error) {
	return w.s.scanWideColumns(ctx, id)
}

func (w wideStore) ReplaceView(ctx context.Context, view, query string) error {
	return w.s.replaceView(ctx, view, query)
}

// Surveys lists the surveys that have responses.
func (w wideStore) Surveys(ctx context.Context) ([]int64, error) {
	ids, err := queryColumn[int64](ctx, w.s.conn, "SELECT DISTINCT survey_id FROM "+w.s.table("responses")+" ORDER BY survey_id")
	if err != nil {
		return nil, fmt.Errorf("clickhouse: list surveys: %w", err)
	}
	return ids, nil
}

// View reads view's query and column names from system.tables and
// system.columns ("" when there is no such view).
func (w wideStore) View(ctx context.Context, view string) (string, []string, error) {
	var query string
	if err := w.s.conn.QueryRow(ctx, "SELECT create_table_query FROM system.tables WHERE database = ? AND name = ?",
		w.s.opts.Database, view).Scan(&query); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return "", nil, nil
		}
		return "", nil, err
	}
	names, err := w.s.strings(ctx, "SELECT name FROM system.columns WHERE database = ? AND table = ?",
		w.s.opts.Database, view)
	return query, names, err
}

// WideColumns reads survey id's wide-view columns from wide_columns, in
// view order.
func (s *Sink) WideColumns(ctx context.Context, id int64) ([]WideColumn, error) {
	rows, err := s.conn.Query(ctx, fmt.Sprintf(`SELECT question_id, row_id, part, column_name, column_kind, question_type, variable,
    question_title, row_label, page_index, question_index, first_seen
FROM %s FINAL WHERE survey_id = ? ORDER BY first_seen, question_id, row_id, part`, s.table("wide_columns")), id)
	if err != nil {
		return nil, fmt.Errorf("clickhouse: read %s: %w", s.table("wide_columns"), err)
	}
	defer rows.Close()
	var cols []WideColumn
	for rows.Next() {
		c := WideColumn{SurveyID: id}
		if err := rows.Scan(&c.QuestionID, &c.RowID, &c.Part, &c.Name, &c.Kind, &c.QuestionType, &c.Variable,
			&c.Title, &c.RowLabel, &c.PageIndex, &c.QuestionIndex, &c.FirstSeen); err != nil {
			return nil, fmt.Errorf("clickhouse: read %s: %w", s.table("wide_columns"), err)
		}
		if wide.TypeOf(c.Kind) == "" {
			c.Kind = KindValues
		}
		if err := wide.CheckColumnName(c.Name); err != nil {
			return nil, s.badWideColumn(c, err)
		}
		cols = append(cols, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("clickhouse: read %s: %w", s.table("wide_columns"), err)
	}
	wide.SortColumns(cols)
	return cols, nil
}

// badWideColumn is the error for a row of wide_columns whose name
// surveysync would not give (written by hand, or copied from another
// server by copy-from): it names the survey, the column and the fix. The
// name never reaches a view's SQL.
func (s *Sink) badWideColumn(c WideColumn, err error) error {
	local, on := s.table("wide_columns"), ""
	if s.opts.Cluster != "" {
		local, on = s.table("wide_columns_local"), s.tmpl.OnCluster
	}
	return fmt.Errorf("clickhouse: %s: survey %d, question %d (row %d, part %q): %w; "+
		"surveysync never names a column so, this row was written by something else (or copied from another server). "+
		"Fix: ALTER TABLE %s%s DELETE WHERE survey_id = %d AND question_id = %d AND row_id = %d AND part = %s, "+
		"then surveysync views --refresh names the column again",
		s.table("wide_columns"), c.SurveyID, c.QuestionID, c.RowID, c.Part, err,
		local, on, c.SurveyID, c.QuestionID, c.RowID, quoteString(c.Part))
}

func (s *Sink) writeWideColumns(ctx context.Context, cols []WideColumn) error {
	batch, err := s.conn.PrepareBatch(s.insertCtx(ctx), fmt.Sprintf(`INSERT INTO %s (survey_id, question_id, row_id, part,
    column_name, column_kind, column_type, question_type, variable, question_title, row_label, page_index, question_index,
    first_seen, _version)`, s.table("wide_columns")))
	if err != nil {
		return err
	}
	defer batch.Close()
	for _, c := range cols {
		if err := batch.Append(c.SurveyID, c.QuestionID, c.RowID, c.Part, c.Name, c.Kind, c.Type(), c.QuestionType,
			c.Variable, c.Title, c.RowLabel, c.PageIndex, c.QuestionIndex, c.FirstSeen, s.nextVersion()); err != nil {
			return err
		}
	}
	return batch.Send()
}

// replaceView creates or replaces view (a name in the database) as query.
func (s *Sink) replaceView(ctx context.Context, view, query string) error {
	name := s.table(view)
	if !s.noReplaceView.Load() {
		err := s.conn.Exec(s.wideDDLCtx(ctx), fmt.Sprintf("CREATE OR REPLACE VIEW %s%s AS\n%s", name, s.tmpl.OnCluster, query))
		if err == nil {
			return nil
		}
		var ex *ch.Exception
		if !errors.As(err, &ex) || ex.Code != codeSyntaxError {
			return s.clusterDDLError(err)
		}
		s.noReplaceView.Store(true)
	}
	tmp, old := name+"__new", name+"__old"
	for _, stmt := range []string{
		fmt.Sprintf("DROP TABLE IF EXISTS %s%s", tmp, s.tmpl.OnCluster),
		fmt.Sprintf("DROP TABLE IF EXISTS %s%s", old, s.tmpl.OnCluster),
		fmt.Sprintf("CREATE VIEW %s%s AS\n%s", tmp, s.tmpl.OnCluster, query),
	} {
		if err := s.conn.Exec(s.wideDDLCtx(ctx), stmt); err != nil {
			return s.clusterDDLError(err)
		}
	}
	exists, err := s.tableExists(ctx, view)
	if err != nil {
		return err
	}
	rename := fmt.Sprintf("RENAME TABLE %s TO %s%s", tmp, name, s.tmpl.OnCluster)
	if exists {
		rename = fmt.Sprintf("RENAME TABLE %s TO %s, %s TO %s%s", name, old, tmp, name, s.tmpl.OnCluster)
	}
	if err := s.conn.Exec(s.wideDDLCtx(ctx), rename); err != nil {
		return s.clusterDDLError(err)
	}
	if exists {
		if err := s.conn.Exec(s.wideDDLCtx(ctx), fmt.Sprintf("DROP TABLE IF EXISTS %s%s", old, s.tmpl.OnCluster)); err != nil {
			return s.clusterDDLError(err)
		}
	}
	return nil
}

// wideDDLTimeout bounds how long an ON CLUSTER statement replacing a wide
// view waits for every node: it runs inside Write, and with a node down
// it would hold the write for clickhouse.ddl_timeout. A statement that
// times out stays queued and runs when the node is back (the swap's
// statements are in order, so the node ends with the new view); the
// replacement is tried again a minute later.
const wideDDLTimeout = 5 * time.Second

func (s *Sink) wideDDLCtx(ctx context.Context) context.Context {
	if s.tmpl.OnCluster == "" {
		return ctx
	}
	secs := int((min(s.opts.DDLTimeout, wideDDLTimeout) + time.Second - 1) / time.Second)
	return ch.Context(ctx, ch.WithSettings(ch.Settings{"distributed_ddl_task_timeout": secs}))
}

func (s *Sink) tableExists(ctx context.Context, name string) (bool, error) {
	var n uint64
	if err := s.conn.QueryRow(ctx, "SELECT count() FROM system.tables WHERE database = ? AND name = ?",
		s.opts.Database, name).Scan(&n); err != nil {
		return false, fmt.Errorf("clickhouse: system.tables: %w", err)
	}
	return n > 0, nil
}

// scanWideColumns reads the answers table for the columns of survey id's
// questions (the upkeep keeps those not recorded).
func (s *Sink) scanWideColumns(ctx context.Context, id int64) ([]WideColumn, error) {
	rows, err := s.conn.Query(ctx, fmt.Sprintf(`SELECT question_id, ifNull(row_id, 0) AS row, max(isNotNull(other_id)) AS has_other,
    argMax(question_type, _version), argMax(variable, _version), argMax(question_title, _version), argMax(row_label, _version),
    min(page_index), min(question_index)
FROM %s WHERE survey_id = ? GROUP BY question_id, row
ORDER BY min(page_index), min(question_index), question_id, row`, s.table("answers")), id)
	if err != nil {
		return nil, fmt.Errorf("clickhouse: scan answers of survey %d: %w", id, err)
	}
	defer rows.Close()
	now := time.Now().UTC().Truncate(time.Second)
	var cols []WideColumn
	for rows.Next() {
		c := WideColumn{SurveyID: id, FirstSeen: now}
		var hasOther uint8
		if err := rows.Scan(&c.QuestionID, &c.RowID, &hasOther, &c.QuestionType, &c.Variable, &c.Title, &c.RowLabel,
			&c.PageIndex, &c.QuestionIndex); err != nil {
			return nil, fmt.Errorf("clickhouse: scan answers of survey %d: %w", id, err)
		}
		c.Kind = wide.QuestionKind(c.QuestionType, c.RowID != 0)
		cols = append(cols, c)
		if hasOther == 1 {
			c.RowID, c.RowLabel, c.Part, c.Kind = 0, "", "other", KindOther
			cols = append(cols, c)
		}
	}
	return cols, rows.Err()
}

// WideView describes one survey's wide view.
type WideView = wide.View

// WideViews lists the surveys that have responses, with their views'
// columns (surveyIDs restricts the list).
func (s *Sink) WideViews(ctx context.Context, surveyIDs ...int64) ([]WideView, error) {
	return s.views.Views(ctx, surveyIDs...)
}

// RefreshWideViews records the columns of every question surveysync has
// stored answers of (for surveys written before wide views existed, or
// after wide_columns was emptied) and creates or replaces the views of the
// given surveys (all with responses when none is given).
func (s *Sink) RefreshWideViews(ctx context.Context, surveyIDs ...int64) ([]WideView, error) {
	return s.views.Refresh(ctx, surveyIDs...)
}

// WideViewSQL is the SELECT of survey surveyID's wide view over database
// with the given columns, as for a current ClickHouse (the chdb check runs
// it on 26.7).
func WideViewSQL(database string, surveyID int64, cols []WideColumn) string {
	return wide.ViewSQL(database, surveyID, cols, true)
}
