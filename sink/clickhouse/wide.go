package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/surveysync/surveysync/wide"
)

// Wide views (issue 21, docs/schema.md "Wide tables"): one view per survey,
// survey_<id>, with one row per current response and one typed column per
// question (per matrix row; plus the "other" text of choice questions that
// have one). The columns come from what surveysync has seen in the survey's
// answers, recorded in the companion table wide_columns with the column's
// name, assigned once and kept. Write notices a question, matrix row or
// "other" text it has not seen before, records it and replaces the view; no
// restart. Choices need nothing: a choice is a value (its label), not a
// column.

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

type wideKey = wide.Key

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

// wideViewNames are survey id's view names: survey_<id>, then its friendly
// name if it has one.
func (s *Sink) wideViewNames(id int64) []string {
	names := []string{WideViewName(id)}
	if n := s.opts.Wide.Names[id]; n != "" {
		names = append(names, n)
	}
	return names
}

// viewColumns are the columns of survey id's view: every recorded column,
// without the choice-id ones unless they are asked for (a daemon that
// recorded them once keeps them in wide_columns); the caller holds
// s.wide.mu.
func (s *Sink) viewColumns(id int64) []WideColumn {
	if s.opts.Wide.ChoiceIDs {
		return s.wide.cols[id]
	}
	var out []WideColumn
	for _, c := range s.wide.cols[id] {
		if c.Part != wide.PartID {
			out = append(out, c)
		}
	}
	return out
}

// withChoiceIDs adds to fresh, when choice ids are asked for, the
// choice-id column of every label column of survey id (recorded or in
// fresh) that has none; the caller holds s.wide.mu.
func (s *Sink) withChoiceIDs(id int64, fresh []WideColumn) []WideColumn {
	if !s.opts.Wide.ChoiceIDs {
		return fresh
	}
	have := map[wideKey]bool{}
	for _, c := range fresh {
		have[c.Key()] = true
	}
	var add []WideColumn
	for _, list := range [][]WideColumn{s.wide.cols[id], fresh} {
		for _, c := range list {
			if c.Kind != KindLabel || c.Part != wide.PartAnswer {
				continue
			}
			c.Part, c.Kind, c.Name = wide.PartID, KindChoiceID, ""
			if _, ok := s.wide.known[c.Key()]; ok || have[c.Key()] {
				continue
			}
			have[c.Key()] = true
			add = append(add, c)
		}
	}
	return append(fresh, add...)
}

// WideViewName is the name of survey id's wide view.
func WideViewName(surveyID int64) string { return wide.ViewName(surveyID) }

var wideResponseColumns = wide.ResponseColumns

// quoteIdent quotes an identifier for every supported ClickHouse (18.16
// and current ones read the same escapes in back-quoted names): the
// backslash and the backtick escaped, control bytes as \xHH, so no name
// can end the quotes early or change what follows.
func quoteIdent(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('`')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\' || c == '`':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c == 0x7f:
			fmt.Fprintf(&b, "\\x%02X", c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('`')
	return b.String()
}

// wideLabel is the label of an answer cell: the chosen option, or a matrix
// cell's column.
const wideLabel = "if(choice_label != '', choice_label, column_label)"

// wideValues is an answer cell of a question of unknown type, as text.
const wideValues = "multiIf(choice_label != '', choice_label, column_label != '', column_label, text != '', text, " +
	"isNotNull(value), toString(assumeNotNull(value)), '')"

// Kind codes inside the view's query.
// (kind < 8: a cell's position and kind travel as one number, pos * 8 + kind).
var kindCodes = map[string]int{KindLabel: 1, KindText: 2, KindNumber: 3, KindLabels: 4, KindFiles: 5, KindValues: 6}

// wideSelect is the query of survey's wide view over the tables of db
// (public names: on a cluster the Distributed tables, so the view is the
// same on every node).
//
// Its shape keeps it fast (docs/benchmarks.md, "Wide views"):
//   - no FINAL: both sides are GROUP BY response_id subqueries, into which
//     ClickHouse pushes a filter on response_id
//     (enable_optimize_predicate_expression: on by default in current
//     releases, to be set in the user's profile on 18.16);
//   - the responses side picks each response's latest version with argMax
//     and drops deleted responses; the answers side aggregates each
//     version's answers, and the join on (response_id, _version) keeps only
//     those of the latest version, so an older version's answers (or
//     answers written before their responses row) never show;
//   - a handful of aggregate functions whatever the number of questions:
//     each answer cell gets its column's position (transform of a key of
//     question and matrix row), groupArray collects positions and values
//     per response version, a single-valued column is picked with indexOf,
//     a multi-valued one filtered from the sorted, distinct (a retried
//     write's identical rows count once) cells. One -If aggregate per
//     column was 10× slower; groupArrayInsertAt and groupUniqArray ran out
//     of memory.
//
// aliases names the join's two subqueries (r, a): current releases require
// it (joined_subquery_requires_alias), while 18.16 then no longer pushes a
// filter into them.
func wideSelect(db string, surveyID int64, cols []WideColumn, aliases bool) string {
	alias := func(a string) string {
		if aliases {
			return " AS " + a
		}
		return ""
	}
	var b strings.Builder
	b.WriteString("SELECT\n    response_id, survey_id, survey_name, response_status, date_created, date_completed, total_time,\n")
	b.WriteString("    distribution_id, contact_id, contact_id_hash, ip_address, `url_parameters.name`, `url_parameters.value`,\n")
	b.WriteString("    synced_at, _version")
	// The columns are picked from the answers side's arrays after the join
	// (picked before it, the join's table took over 4 GB for 100k responses
	// × 75 columns on 18.16).
	// A choice-id column reads the cells of its label column.
	labelPos := map[wideKey]int{}
	for i, c := range cols {
		if c.Kind == KindLabel {
			labelPos[wideKey{Question: c.QuestionID, Row: c.RowID}] = i + 1
		}
	}
	for i, c := range cols {
		p := i + 1
		var expr string
		switch {
		case c.Kind == KindOther:
			expr = fmt.Sprintf("t_[indexOf(op_, %d)]", p)
		case c.Kind == KindNumber:
			expr = fmt.Sprintf("if(s_[indexOf(p_, %d)] = '', NULL, toNullable(n_[indexOf(p_, %d)]))", p, p)
		case c.Kind == KindChoiceID:
			lp := labelPos[wideKey{Question: c.QuestionID, Row: c.RowID}]
			expr = fmt.Sprintf("if(indexOf(p_, %d) = 0 OR c_[indexOf(p_, %d)] = %s, NULL, toNullable(c_[indexOf(p_, %d)]))",
				lp, lp, noChoiceID, lp)
		case wide.IsArray(c.Kind):
			// a_ is sorted by position: the column's cells are a slice.
			expr = fmt.Sprintf("arraySlice(as_, indexOf(ap_, %d), countEqual(ap_, %d))", p, p)
		default:
			// (One array v_ = arrayMap(i -> s_[indexOf(p_, i)], range(n))
			// on the answers side was a third cheaper to analyse, but the
			// join's table then held it for every response: out of memory
			// on a full scan.)
			expr = fmt.Sprintf("s_[indexOf(p_, %d)]", p)
		}
		fmt.Fprintf(&b, ",\n    %s AS %s", expr, quoteIdent(c.Name))
	}
	fmt.Fprintf(&b, `
FROM
(
    SELECT
        response_id, toInt64(%d) AS survey_id, r_survey_name AS survey_name, r_response_status AS response_status,
        r_date_created AS date_created, r_date_completed AS date_completed, r_total_time AS total_time,
        r_distribution_id AS distribution_id, r_contact_id AS contact_id, r_contact_id_hash AS contact_id_hash,
        r_ip_address AS ip_address, r_url_names AS `+"`url_parameters.name`"+`, r_url_values AS `+"`url_parameters.value`"+`,
        r_synced_at AS synced_at, r_version_`+wideFormat+` AS _version
    FROM
    (
        SELECT
            response_id,
            argMax(survey_name, _version) AS r_survey_name, argMax(response_status, _version) AS r_response_status,
            argMax(date_created, _version) AS r_date_created, argMax(date_completed, _version) AS r_date_completed,
            argMax(total_time, _version) AS r_total_time, argMax(distribution_id, _version) AS r_distribution_id,
            argMax(contact_id, _version) AS r_contact_id, argMax(contact_id_hash, _version) AS r_contact_id_hash,
            argMax(ip_address, _version) AS r_ip_address, argMax(url_parameters.name, _version) AS r_url_names,
            argMax(url_parameters.value, _version) AS r_url_values, argMax(synced_at, _version) AS r_synced_at,
            argMax(is_deleted, _version) AS r_is_deleted, max(_version) AS r_version_`+wideFormat+`
        FROM %s.responses
        WHERE survey_id = %d
        GROUP BY response_id
    )
    WHERE r_is_deleted = 0
)%s`, surveyID, db, surveyID, alias("r"))
	if len(cols) == 0 {
		return b.String()
	}
	// Positions (from 1) of the columns, and what the answers side needs.
	var keys, codes, otherQs, otherPos []string
	var numbers, others, arrays, ids bool
	// A cell's column is found by a key of its question and matrix row:
	// question_id << 32 | row_id when every id fits 32 bits (the service's
	// ids do), else a hash. (Constant arrays of cityHash64 cost 50-90 ms
	// per query on 18.16, most of a point lookup.)
	small := true
	for _, c := range cols {
		small = small && c.QuestionID >= 0 && c.QuestionID < 1<<32 && c.RowID >= 0 && c.RowID < 1<<32
	}
	cellKey := func(q, r int64) string {
		if small {
			return strconv.FormatUint(uint64(q)<<32|uint64(r), 10)
		}
		return fmt.Sprintf("cityHash64(toInt64(%d), toInt64(%d))", q, r)
	}
	rowKey := "cityHash64(question_id, ifNull(row_id, toInt64(0)))"
	if small {
		rowKey = "if(question_id >= 0 AND question_id < 4294967296 AND ifNull(row_id, 0) >= 0 AND ifNull(row_id, 0) < 4294967296, " +
			"bitOr(bitShiftLeft(toUInt64(question_id), 32), toUInt64(ifNull(row_id, 0))), 0)"
	}
	for i, c := range cols {
		switch c.Kind {
		case KindOther:
			others = true
			otherQs = append(otherQs, strconv.FormatInt(c.QuestionID, 10))
			otherPos = append(otherPos, strconv.Itoa(i+1))
			continue
		case KindChoiceID:
			ids = true
			continue
		}
		keys = append(keys, cellKey(c.QuestionID, c.RowID))
		// Position and kind in one number: pk = position * 8 + kind.
		codes = append(codes, strconv.Itoa((i+1)*8+kindCodes[c.Kind]))
		numbers = numbers || c.Kind == KindNumber
		arrays = arrays || wide.IsArray(c.Kind)
	}
	if len(keys) == 0 { // only "other" columns: keep the arrays typed
		keys, codes = []string{"toUInt64(0)"}, []string{"0"}
	}
	b.WriteString("\nALL LEFT JOIN\n(\n    SELECT\n        response_id,\n        _version,\n        groupArray(pos) AS p_,\n        groupArray(str) AS s_")
	if numbers {
		b.WriteString(",\n        groupArray(num) AS n_")
	}
	if ids {
		b.WriteString(",\n        groupArray(cid) AS c_")
	}
	if others {
		b.WriteString(",\n        groupArray(opos) AS op_,\n        groupArray(text) AS t_")
	}
	if arrays {
		b.WriteString(",\n        arraySort(arrayDistinct(groupArrayIf((pos, answer_index, str), k >= 4))) AS a_," +
			"\n        arrayMap(x -> tupleElement(x, 1), a_) AS ap_,\n        arrayMap(x -> tupleElement(x, 3), a_) AS as_")
	}
	// Three levels: the cells with their column (pk, one transform), then
	// what each kind keeps (str, num, cid: reading pk, a column, rather than
	// repeating the transform, which 18.16 expands at every use of an alias
	// and took most of a point lookup's time analysing), then per response
	// version.
	fmt.Fprintf(&b, `
    FROM
    (
        SELECT
            response_id, _version, answer_index, text, intDiv(pk, 8) AS pos, pk %% 8 AS k,
            multiIf(k = 1 OR k = 4, %s, k = 2 OR k = 5, text, k = 3, if(isNull(value), '', 'n'), k = 6, %s, '') AS str`,
		wideLabel, wideValues)
	if numbers {
		b.WriteString(",\n            ifNull(value, toInt64(0)) AS num")
	}
	if ids {
		b.WriteString(",\n            ifNull(choice_id, ifNull(column_id, " + noChoiceID + ")) AS cid")
	}
	if others {
		fmt.Fprintf(&b, ",\n            if(isNull(other_id), 0, transform(question_id, [%s], [%s], 0)) AS opos",
			strings.Join(otherQs, ", "), strings.Join(otherPos, ", "))
	}
	fmt.Fprintf(&b, `
        FROM
        (
            SELECT
                response_id, _version, answer_index, text, choice_label, column_label, value, choice_id, column_id,
                other_id, question_id, transform(%s, [%s], [%s], 0) AS pk
            FROM %s.answers
            WHERE survey_id = %d
        )
    )
    GROUP BY response_id, _version
)%s
USING (response_id, _version)`, rowKey, strings.Join(keys, ", "), strings.Join(codes, ", "), db, surveyID, alias("a"))
	return b.String()
}

// noChoiceID stands for "no id" in the choice-id cells (no real id is the
// smallest Int64; groupArray would skip a NULL and shift the positions).
const noChoiceID = "toInt64('-9223372036854775808')"

// wideState is what the Sink knows of the wide views: the columns per
// survey (loaded from wide_columns on first use) and the surveys whose view
// must be replaced (a failed replacement is tried again at the next Write).
type wideState struct {
	mu     sync.Mutex
	loaded map[int64]bool
	cols   map[int64][]WideColumn
	known  map[wideKey]int // index into cols[survey]
	stale  map[int64]bool
	// retryAt: after a failure, a survey's view is not touched before then.
	retryAt map[int64]time.Time
	// noReplace: the server has no CREATE OR REPLACE VIEW (ClickHouse 18.16).
	noReplace bool
}

func (w *wideState) init() {
	if w.loaded == nil {
		w.loaded = map[int64]bool{}
		w.cols = map[int64][]WideColumn{}
		w.known = map[wideKey]int{}
		w.stale = map[int64]bool{}
		w.retryAt = map[int64]time.Time{}
	}
}

// seenColumns lists the columns the answers of rec call for that known
// lacks, one per key, with what the first row of each says (strings copied:
// rec's buffers are released after the write).
func seenColumns(rec arrow.RecordBatch, known map[wideKey]int) map[wideKey]WideColumn {
	if rec == nil || rec.NumRows() == 0 {
		return nil
	}
	idx := map[string]int{}
	for i, f := range rec.Schema().Fields() {
		idx[f.Name] = i
	}
	col := func(name string) arrow.Array { return rec.Column(idx[name]) }
	survey := col("survey_id").(*array.Int64)
	question := col("question_id").(*array.Int64)
	row := col("row_id").(*array.Int64)
	other := col("other_id").(*array.Int64)
	qtype := col("question_type").(*array.String)
	variable := col("variable").(*array.String)
	title := col("question_title").(*array.String)
	rowLabel := col("row_label").(*array.String)
	page := col("page_index").(*array.Uint16)
	qidx := col("question_index").(*array.Uint16)
	var out map[wideKey]WideColumn
	now := time.Now().UTC().Truncate(time.Second)
	add := func(k wideKey, i int) {
		if _, ok := known[k]; ok {
			return
		}
		if _, ok := out[k]; ok {
			return
		}
		if out == nil {
			out = map[wideKey]WideColumn{}
		}
		c := WideColumn{
			SurveyID: k.Survey, QuestionID: k.Question, RowID: k.Row, Part: k.Part,
			QuestionType: strings.Clone(qtype.Value(i)), Variable: strings.Clone(variable.Value(i)),
			Title: strings.Clone(title.Value(i)), PageIndex: page.Value(i), QuestionIndex: qidx.Value(i), FirstSeen: now,
		}
		if k.Part == "other" {
			c.Kind = KindOther
		} else {
			if k.Row != 0 {
				c.RowLabel = strings.Clone(rowLabel.Value(i))
			}
			c.Kind = wide.QuestionKind(c.QuestionType, k.Row != 0)
		}
		out[k] = c
	}
	for i := 0; i < int(rec.NumRows()); i++ {
		k := wideKey{Survey: survey.Value(i), Question: question.Value(i)}
		if row.IsValid(i) {
			k.Row = row.Value(i)
		}
		add(k, i)
		if other.IsValid(i) {
			add(wideKey{Survey: k.Survey, Question: k.Question, Part: "other"}, i)
		}
	}
	return out
}

// updateWideViews is called by Write once a batch is stored: it records the
// columns it had not seen, and creates or replaces the views of the surveys
// that have new columns (or no view yet). A failure is logged, not
// returned: the rows are written, and the view is replaced at the next
// Write (or by `surveysync views --refresh`).
func (s *Sink) updateWideViews(ctx context.Context, responses, answers arrow.RecordBatch) {
	s.wide.mu.Lock()
	defer s.wide.mu.Unlock()
	s.wide.init()
	seen := seenColumns(answers, s.wide.known)
	surveys := map[int64]bool{}
	if responses != nil && responses.NumRows() > 0 {
		ids := responses.Column(responses.Schema().FieldIndices("survey_id")[0]).(*array.Int64)
		for i := 0; i < ids.Len(); i++ {
			if !s.wide.loaded[ids.Value(i)] {
				surveys[ids.Value(i)] = true
			}
		}
	}
	fresh := map[int64][]WideColumn{}
	for k, c := range seen {
		surveys[k.Survey] = true
		fresh[k.Survey] = append(fresh[k.Survey], c)
	}
	now := time.Now()
	for id := range surveys {
		if now.Before(s.wide.retryAt[id]) {
			continue
		}
		if !s.wide.loaded[id] {
			if err := s.loadWideColumns(ctx, id); err != nil {
				s.wideFailed(id, now, "reading wide_columns", err)
				continue
			}
			// Replaced once per process unless it is already what this
			// surveysync would create (a start does not re-create every
			// view: ON CLUSTER statements take seconds each).
			if !s.wideViewCurrent(ctx, id) {
				s.wide.stale[id] = true
			}
			// Fresh columns may have been recorded by an earlier run.
			var still []WideColumn
			for _, c := range fresh[id] {
				if _, ok := s.wide.known[c.Key()]; !ok {
					still = append(still, c)
				}
			}
			fresh[id] = still
			if len(s.wide.cols[id]) == 0 {
				// No columns recorded: a new survey, or one an older
				// surveysync wrote. Its stored answers (this batch's
				// included) tell every question's column.
				scanned, err := s.scanWideColumns(ctx, id)
				if err != nil {
					s.wideFailed(id, now, "scanning the answers", err)
					continue
				}
				if len(scanned) > 0 {
					have := map[wideKey]bool{}
					for _, c := range scanned {
						have[c.Key()] = true
					}
					for _, c := range fresh[id] {
						if !have[c.Key()] {
							scanned = append(scanned, c)
						}
					}
					fresh[id] = scanned
				}
			}
		}
		fresh[id] = s.withChoiceIDs(id, fresh[id])
		if len(fresh[id]) > 0 {
			if err := s.addWideColumns(ctx, id, fresh[id]); err != nil {
				s.wideFailed(id, now, "recording new columns", err)
				continue
			}
			s.wide.stale[id] = true
		}
	}
	for id := range s.wide.stale {
		if now.Before(s.wide.retryAt[id]) {
			continue
		}
		start := time.Now()
		if err := s.replaceWideView(ctx, id); err != nil {
			s.wideFailed(id, now, "replacing the view", err)
			continue
		}
		delete(s.wide.stale, id)
		delete(s.wide.retryAt, id)
		s.log.Info("wide view replaced", "view", s.table(WideViewName(id)), "columns", len(s.viewColumns(id)),
			"took", time.Since(start).Round(time.Millisecond))
	}
}

// wideFormat marks the views this code creates (in an alias of the view's
// query): change it when wideSelect changes, and running daemons' views are
// replaced at their next start.
const wideFormat = "w2"

// wideViewCurrent reports whether survey id's view exists with the known
// columns, in order, and this code's format; the caller holds s.wide.mu.
func (s *Sink) wideViewCurrent(ctx context.Context, id int64) bool {
	want := append([]string(nil), wideResponseColumns...)
	for _, c := range s.viewColumns(id) {
		want = append(want, c.Name)
	}
	for _, view := range s.wideViewNames(id) {
		if !s.viewIs(ctx, view, want) {
			return false
		}
	}
	return true
}

// viewIs reports whether view exists with the columns want, in order, and
// this code's format.
func (s *Sink) viewIs(ctx context.Context, view string, want []string) bool {
	var query string
	if err := s.conn.QueryRow(ctx, "SELECT create_table_query FROM system.tables WHERE database = ? AND name = ?",
		s.opts.Database, view).Scan(&query); err != nil || !strings.Contains(query, "r_version_"+wideFormat) {
		return false
	}
	var names []string
	rows, err := s.conn.Query(ctx, "SELECT name FROM system.columns WHERE database = ? AND table = ?",
		s.opts.Database, view)
	if err != nil {
		return false
	}
	defer rows.Close()
	for rows.Next() {
		var n string
		if rows.Scan(&n) != nil {
			return false
		}
		names = append(names, n)
	}
	return rows.Err() == nil && strings.Join(names, "\x00") == strings.Join(want, "\x00")
}

// wideRetry is how long a survey's wide view is left alone after a failure
// (an ON CLUSTER statement with a node down waits clickhouse.ddl_timeout).
const wideRetry = time.Minute

func (s *Sink) wideFailed(id int64, now time.Time, what string, err error) {
	s.wide.retryAt[id] = now.Add(wideRetry)
	s.log.Warn("wide view: "+what+" failed; tried again at a write after "+wideRetry.String(),
		"survey_id", id, "view", s.table(WideViewName(id)), "error", err)
}

// loadWideColumns reads survey id's columns from wide_columns; the caller
// holds s.wide.mu.
func (s *Sink) loadWideColumns(ctx context.Context, id int64) error {
	cols, err := s.WideColumns(ctx, id)
	if err != nil {
		return err
	}
	s.setWideColumns(id, cols)
	s.wide.loaded[id] = true
	return nil
}

func (s *Sink) setWideColumns(id int64, cols []WideColumn) {
	for _, c := range s.wide.cols[id] {
		delete(s.wide.known, c.Key())
	}
	s.wide.cols[id] = cols
	for i, c := range cols {
		s.wide.known[c.Key()] = i
	}
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

// addWideColumns names fresh columns of survey id and records them; the
// caller holds s.wide.mu.
func (s *Sink) addWideColumns(ctx context.Context, id int64, fresh []WideColumn) error {
	wide.SortColumns(fresh)
	wide.AssignNames(s.wide.cols[id], fresh)
	if err := s.writeWideColumns(ctx, fresh); err != nil {
		return err
	}
	cols := append(append([]WideColumn(nil), s.wide.cols[id]...), fresh...)
	wide.SortColumns(cols)
	s.setWideColumns(id, cols)
	return nil
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

// replaceWideView creates or replaces survey id's view from the columns
// known; the caller holds s.wide.mu. CREATE OR REPLACE VIEW where the server
// has it; on ClickHouse 18.16 the new view is created under a temporary name
// and swapped in by RENAME, so the view never disappears on a single node.
// On a cluster (ON CLUSTER), the swap runs on every node.
func (s *Sink) replaceWideView(ctx context.Context, id int64) error {
	query := wideSelect(s.opts.Database, id, s.viewColumns(id), s.version.Version.Major >= 20)
	for _, view := range s.wideViewNames(id) {
		if err := s.replaceView(ctx, view, query); err != nil {
			return err
		}
	}
	return nil
}

// replaceView creates or replaces view (a name in the database) as query.
func (s *Sink) replaceView(ctx context.Context, view, query string) error {
	name := s.table(view)
	if !s.wide.noReplace {
		err := s.conn.Exec(s.wideDDLCtx(ctx), fmt.Sprintf("CREATE OR REPLACE VIEW %s%s AS\n%s", name, s.tmpl.OnCluster, query))
		if err == nil {
			return nil
		}
		var ex *ch.Exception
		if !errors.As(err, &ex) || ex.Code != codeSyntaxError {
			return s.clusterDDLError(err)
		}
		s.wide.noReplace = true
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

// WideView describes one survey's wide view.
type WideView struct {
	SurveyID int64
	View     string // database.survey_<id>
	Alias    string // database.<friendly name>, when the survey has one
	Columns  []WideColumn
}

// WideViews lists the surveys that have responses, with their views'
// columns (surveyIDs restricts the list).
func (s *Sink) WideViews(ctx context.Context, surveyIDs ...int64) ([]WideView, error) {
	ids := surveyIDs
	if len(ids) == 0 {
		rows, err := s.conn.Query(ctx, "SELECT DISTINCT survey_id FROM "+s.table("responses")+" ORDER BY survey_id")
		if err != nil {
			return nil, fmt.Errorf("clickhouse: list surveys: %w", err)
		}
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return nil, fmt.Errorf("clickhouse: list surveys: %w", err)
			}
			ids = append(ids, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("clickhouse: list surveys: %w", err)
		}
	}
	var out []WideView
	for _, id := range ids {
		cols, err := s.WideColumns(ctx, id)
		if err != nil {
			return nil, err
		}
		if !s.opts.Wide.ChoiceIDs {
			kept := cols[:0]
			for _, c := range cols {
				if c.Part != wide.PartID {
					kept = append(kept, c)
				}
			}
			cols = kept
		}
		v := WideView{SurveyID: id, View: s.table(WideViewName(id)), Columns: cols}
		if n := s.opts.Wide.Names[id]; n != "" {
			v.Alias = s.table(n)
		}
		out = append(out, v)
	}
	return out, nil
}

// RefreshWideViews records the columns of every question surveysync has
// stored answers of (for surveys written before wide views existed, or
// after wide_columns was emptied) and creates or replaces the views of the
// given surveys (all with responses when none is given).
func (s *Sink) RefreshWideViews(ctx context.Context, surveyIDs ...int64) ([]WideView, error) {
	views, err := s.WideViews(ctx, surveyIDs...)
	if err != nil {
		return nil, err
	}
	s.wide.mu.Lock()
	defer s.wide.mu.Unlock()
	s.wide.init()
	for i, v := range views {
		all, err := s.WideColumns(ctx, v.SurveyID) // with the choice-id columns: their names are taken
		if err != nil {
			return nil, err
		}
		s.setWideColumns(v.SurveyID, all)
		s.wide.loaded[v.SurveyID] = true
		fresh, err := s.scanWideColumns(ctx, v.SurveyID)
		if err != nil {
			return nil, err
		}
		fresh = s.withChoiceIDs(v.SurveyID, fresh)
		if len(fresh) > 0 {
			if err := s.addWideColumns(ctx, v.SurveyID, fresh); err != nil {
				return nil, err
			}
		}
		if err := s.replaceWideView(ctx, v.SurveyID); err != nil {
			return nil, fmt.Errorf("clickhouse: replace %s: %w", v.View, err)
		}
		delete(s.wide.stale, v.SurveyID)
		views[i].Columns = s.viewColumns(v.SurveyID)
	}
	return views, nil
}

// scanWideColumns reads the answers table for the columns of survey id
// that wide_columns lacks; the caller holds s.wide.mu.
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
	var fresh []WideColumn
	add := func(c WideColumn) {
		if _, ok := s.wide.known[c.Key()]; ok {
			return
		}
		for _, f := range fresh {
			if f.Key() == c.Key() {
				return
			}
		}
		fresh = append(fresh, c)
	}
	for rows.Next() {
		c := WideColumn{SurveyID: id, FirstSeen: now}
		var hasOther uint8
		if err := rows.Scan(&c.QuestionID, &c.RowID, &hasOther, &c.QuestionType, &c.Variable, &c.Title, &c.RowLabel,
			&c.PageIndex, &c.QuestionIndex); err != nil {
			return nil, fmt.Errorf("clickhouse: scan answers of survey %d: %w", id, err)
		}
		c.Kind = wide.QuestionKind(c.QuestionType, c.RowID != 0)
		add(c)
		if hasOther == 1 {
			c.RowID, c.RowLabel, c.Part, c.Kind = 0, "", "other", KindOther
			add(c)
		}
	}
	return fresh, rows.Err()
}

// WideViewSQL is the SELECT of survey surveyID's wide view over database
// with the given columns, as for a current ClickHouse (the chdb check runs
// it on 26.7).
func WideViewSQL(database string, surveyID int64, cols []WideColumn) string {
	return wideSelect(database, surveyID, cols, true)
}
