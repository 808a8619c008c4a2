package wide

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// The upkeep of the wide views (issue 21, docs/schema.md "Wide tables"):
// one view per survey, survey_<id>, with one row per current response and
// one typed column per question (per matrix row; plus the "other" text of
// choice questions that have one). The columns come from what surveysync
// has seen in the survey's answers, recorded (wide_columns) with the
// column's name, assigned once and kept. Choices need nothing: a choice is
// a value (its label), not a column.
//
// The upkeep runs when a survey's questions change, not at every insert:
// after a write, Seen compares the question/row keys of the written
// answers with the columns recorded (a map lookup a row, no query) and
// returns a Change only when the batch names a column not recorded yet,
// a survey the upkeep has not looked at since the start, or a view whose
// replacement failed and is due again. Update then records the new
// columns and creates or replaces the views; no restart. The warehouse
// implements only the storage operations (Store).

// Store is what the upkeep needs of the warehouse that holds the views.
type Store interface {
	// Surveys lists the surveys that have responses.
	Surveys(ctx context.Context) ([]int64, error)
	// Columns reads survey id's recorded columns, in view order.
	Columns(ctx context.Context, id int64) ([]Column, error)
	// RecordColumns records named columns.
	RecordColumns(ctx context.Context, cols []Column) error
	// ScanColumns reads survey id's stored answers for the columns they
	// call for (unnamed), in question order.
	ScanColumns(ctx context.Context, id int64) ([]Column, error)
	// View reads the query and the column names, in order, of view (a name
	// in the database); "" and nil when there is no such view.
	View(ctx context.Context, view string) (query string, columns []string, err error)
	// ReplaceView creates or replaces view (a name in the database) as
	// query.
	ReplaceView(ctx context.Context, view, query string) error
}

// UpkeepOptions configure an Upkeep.
type UpkeepOptions struct {
	// Database holds the tables and the views.
	Database string
	// Aliases names the view query's subqueries (ViewSQL): servers from
	// 20 on require it.
	Aliases bool
	// ChoiceIDs adds beside each label column (single choice, a matrix row
	// with one answer) a column <name>_id: the chosen option's id (the
	// matrix column's for a matrix row), NULL when unanswered.
	ChoiceIDs bool
	// Names gives surveys a second, friendly view name besides
	// survey_<id>: the same view under that name, kept current alike.
	Names map[int64]string
	Log   *slog.Logger
	// Now is the clock of the retry after a failure (nil: time.Now).
	Now func() time.Time
}

// Upkeep keeps the wide views current. It knows the columns per survey
// (read from the store on first use) and the surveys whose view must be
// replaced (a failed replacement is tried again at a write a minute
// later). Its methods are safe for concurrent use.
type Upkeep struct {
	store Store
	opts  UpkeepOptions

	mu     sync.Mutex
	loaded map[int64]bool
	cols   map[int64][]Column
	known  map[Key]int // index into cols[survey]
	stale  map[int64]bool
	// retryAt: after a failure, a survey's view is not touched before then.
	retryAt map[int64]time.Time
}

// NewUpkeep returns the upkeep of the views in store.
func NewUpkeep(store Store, o UpkeepOptions) *Upkeep {
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Upkeep{store: store, opts: o,
		loaded: map[int64]bool{}, cols: map[int64][]Column{}, known: map[Key]int{},
		stale: map[int64]bool{}, retryAt: map[int64]time.Time{}}
}

// View describes one survey's wide view.
type View struct {
	SurveyID int64
	View     string // database.survey_<id>
	Alias    string // database.<friendly name>, when the survey has one
	Columns  []Column
}

// A Change is what a written batch brings that the views lack.
type Change struct {
	surveys map[int64]bool     // surveys to look at
	fresh   map[int64][]Column // columns not recorded yet, per survey
	due     bool               // a failed replacement is due again
}

// Seen compares a written batch (its responses and answers, either nil)
// with what the upkeep knows and returns what the views lack, nil when
// nothing: the batch names no new column, no survey not looked at yet,
// and no failed replacement is due. It reads rec, runs no query.
func (u *Upkeep) Seen(responses, answers arrow.RecordBatch) *Change {
	u.mu.Lock()
	defer u.mu.Unlock()
	now := u.opts.Now()
	ch := &Change{surveys: map[int64]bool{}, fresh: map[int64][]Column{}}
	if responses != nil && responses.NumRows() > 0 {
		ids := responses.Column(responses.Schema().FieldIndices("survey_id")[0]).(*array.Int64)
		for i := 0; i < ids.Len(); i++ {
			if id := ids.Value(i); !u.loaded[id] && !now.Before(u.retryAt[id]) {
				ch.surveys[id] = true
			}
		}
	}
	for k, c := range seenColumns(answers, u.known) {
		if now.Before(u.retryAt[k.Survey]) {
			continue
		}
		ch.surveys[k.Survey] = true
		ch.fresh[k.Survey] = append(ch.fresh[k.Survey], c)
	}
	for id := range u.stale {
		ch.due = ch.due || !now.Before(u.retryAt[id])
	}
	if len(ch.surveys) == 0 && !ch.due {
		return nil
	}
	return ch
}

// Update records the columns of ch and creates or replaces the views of
// the surveys that have new columns (or no view yet). A failure is logged,
// not returned: the rows are written, and the view is replaced at a later
// write (or by `surveysync views --refresh`).
func (u *Upkeep) Update(ctx context.Context, ch *Change) {
	if ch == nil {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	now := u.opts.Now()
	for id := range ch.surveys {
		if now.Before(u.retryAt[id]) {
			continue
		}
		fresh := ch.fresh[id]
		if !u.loaded[id] {
			if err := u.load(ctx, id); err != nil {
				u.failed(id, now, "reading wide_columns", err)
				continue
			}
			// Replaced once per process unless it is already what this
			// surveysync would create (a start does not re-create every
			// view: ON CLUSTER statements take seconds each).
			if !u.viewCurrent(ctx, id) {
				u.stale[id] = true
			}
			if len(u.cols[id]) == 0 {
				// No columns recorded: a new survey, or one an older
				// surveysync wrote. Its stored answers (this batch's
				// included) tell every question's column.
				scanned, err := u.scan(ctx, id)
				if err != nil {
					u.failed(id, now, "scanning the answers", err)
					continue
				}
				have := map[Key]bool{}
				for _, c := range scanned {
					have[c.Key()] = true
				}
				for _, c := range fresh {
					if !have[c.Key()] {
						scanned = append(scanned, c)
					}
				}
				fresh = scanned
			}
		}
		// Fresh columns may have been recorded since Seen (by an earlier
		// run, or a concurrent write).
		fresh = u.withChoiceIDs(id, u.unknown(fresh))
		if len(fresh) > 0 {
			if err := u.add(ctx, id, fresh); err != nil {
				u.failed(id, now, "recording new columns", err)
				continue
			}
			u.stale[id] = true
		}
	}
	for id := range u.stale {
		if now.Before(u.retryAt[id]) {
			continue
		}
		start := time.Now()
		if err := u.replace(ctx, id); err != nil {
			u.failed(id, now, "replacing the view", err)
			continue
		}
		delete(u.stale, id)
		delete(u.retryAt, id)
		u.opts.Log.Info("wide view replaced", "view", u.table(ViewName(id)), "columns", len(u.viewColumns(id)),
			"took", time.Since(start).Round(time.Millisecond))
	}
}

// Views lists the surveys that have responses, with their views' columns
// (surveyIDs restricts the list).
func (u *Upkeep) Views(ctx context.Context, surveyIDs ...int64) ([]View, error) {
	ids := surveyIDs
	if len(ids) == 0 {
		var err error
		if ids, err = u.store.Surveys(ctx); err != nil {
			return nil, err
		}
	}
	var out []View
	for _, id := range ids {
		cols, err := u.store.Columns(ctx, id)
		if err != nil {
			return nil, err
		}
		out = append(out, u.view(id, u.withoutChoiceIDs(cols)))
	}
	return out, nil
}

// Refresh records the columns of every question surveysync has stored
// answers of (for surveys written before wide views existed, or after
// wide_columns was emptied) and creates or replaces the views of the given
// surveys (all with responses when none is given).
func (u *Upkeep) Refresh(ctx context.Context, surveyIDs ...int64) ([]View, error) {
	views, err := u.Views(ctx, surveyIDs...)
	if err != nil {
		return nil, err
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	for i, v := range views {
		if err := u.load(ctx, v.SurveyID); err != nil { // with the choice-id columns: their names are taken
			return nil, err
		}
		fresh, err := u.scan(ctx, v.SurveyID)
		if err != nil {
			return nil, err
		}
		fresh = u.withChoiceIDs(v.SurveyID, fresh)
		if len(fresh) > 0 {
			if err := u.add(ctx, v.SurveyID, fresh); err != nil {
				return nil, err
			}
		}
		if err := u.replace(ctx, v.SurveyID); err != nil {
			return nil, fmt.Errorf("clickhouse: replace %s: %w", v.View, err)
		}
		delete(u.stale, v.SurveyID)
		views[i].Columns = u.viewColumns(v.SurveyID)
	}
	return views, nil
}

// table is name in the database, as logs and View show it.
func (u *Upkeep) table(name string) string { return u.opts.Database + "." + name }

func (u *Upkeep) view(id int64, cols []Column) View {
	v := View{SurveyID: id, View: u.table(ViewName(id)), Columns: cols}
	if n := u.opts.Names[id]; n != "" {
		v.Alias = u.table(n)
	}
	return v
}

// viewNames are survey id's view names: survey_<id>, then its friendly
// name if it has one.
func (u *Upkeep) viewNames(id int64) []string {
	names := []string{ViewName(id)}
	if n := u.opts.Names[id]; n != "" {
		names = append(names, n)
	}
	return names
}

// withoutChoiceIDs is cols without the choice-id ones unless they are
// asked for (a daemon that recorded them once keeps them recorded).
func (u *Upkeep) withoutChoiceIDs(cols []Column) []Column {
	if u.opts.ChoiceIDs {
		return cols
	}
	var out []Column
	for _, c := range cols {
		if c.Part != PartID {
			out = append(out, c)
		}
	}
	return out
}

// viewColumns are the columns of survey id's view; the caller holds u.mu.
func (u *Upkeep) viewColumns(id int64) []Column { return u.withoutChoiceIDs(u.cols[id]) }

// withChoiceIDs adds to fresh, when choice ids are asked for, the
// choice-id column of every label column of survey id (recorded or in
// fresh) that has none; the caller holds u.mu.
func (u *Upkeep) withChoiceIDs(id int64, fresh []Column) []Column {
	if !u.opts.ChoiceIDs {
		return fresh
	}
	have := map[Key]bool{}
	for _, c := range fresh {
		have[c.Key()] = true
	}
	var add []Column
	for _, list := range [][]Column{u.cols[id], fresh} {
		for _, c := range list {
			if c.Kind != KindLabel || c.Part != PartAnswer {
				continue
			}
			c.Part, c.Kind, c.Name = PartID, KindChoiceID, ""
			if _, ok := u.known[c.Key()]; ok || have[c.Key()] {
				continue
			}
			have[c.Key()] = true
			add = append(add, c)
		}
	}
	return append(fresh, add...)
}

// viewCurrent reports whether survey id's views exist with the known
// columns, in order, and this code's format; the caller holds u.mu.
func (u *Upkeep) viewCurrent(ctx context.Context, id int64) bool {
	want := append([]string(nil), ResponseColumns...)
	for _, c := range u.viewColumns(id) {
		want = append(want, c.Name)
	}
	for _, view := range u.viewNames(id) {
		query, names, err := u.store.View(ctx, view)
		if err != nil || !strings.Contains(query, "r_version_"+viewFormat) ||
			strings.Join(names, "\x00") != strings.Join(want, "\x00") {
			return false
		}
	}
	return true
}

// retryAfter is how long a survey's wide view is left alone after a
// failure (an ON CLUSTER statement with a node down waits
// clickhouse.ddl_timeout).
const retryAfter = time.Minute

func (u *Upkeep) failed(id int64, now time.Time, what string, err error) {
	u.retryAt[id] = now.Add(retryAfter)
	u.opts.Log.Warn("wide view: "+what+" failed; tried again at a write after "+retryAfter.String(),
		"survey_id", id, "view", u.table(ViewName(id)), "error", err)
}

// load reads survey id's recorded columns; the caller holds u.mu.
func (u *Upkeep) load(ctx context.Context, id int64) error {
	cols, err := u.store.Columns(ctx, id)
	if err != nil {
		return err
	}
	u.set(id, cols)
	u.loaded[id] = true
	return nil
}

func (u *Upkeep) set(id int64, cols []Column) {
	for _, c := range u.cols[id] {
		delete(u.known, c.Key())
	}
	u.cols[id] = cols
	for i, c := range cols {
		u.known[c.Key()] = i
	}
}

// unknown is cols without the columns recorded; the caller holds u.mu.
func (u *Upkeep) unknown(cols []Column) []Column {
	var out []Column
	for _, c := range cols {
		if _, ok := u.known[c.Key()]; !ok {
			out = append(out, c)
		}
	}
	return out
}

// scan reads the stored answers of survey id for the columns not
// recorded, one per key; the caller holds u.mu.
func (u *Upkeep) scan(ctx context.Context, id int64) ([]Column, error) {
	all, err := u.store.ScanColumns(ctx, id)
	if err != nil {
		return nil, err
	}
	var fresh []Column
	have := map[Key]bool{}
	for _, c := range all {
		if _, ok := u.known[c.Key()]; ok || have[c.Key()] {
			continue
		}
		have[c.Key()] = true
		fresh = append(fresh, c)
	}
	return fresh, nil
}

// add names fresh columns of survey id and records them; the caller holds
// u.mu.
func (u *Upkeep) add(ctx context.Context, id int64, fresh []Column) error {
	SortColumns(fresh)
	AssignNames(u.cols[id], fresh)
	if err := u.store.RecordColumns(ctx, fresh); err != nil {
		return err
	}
	cols := append(append([]Column(nil), u.cols[id]...), fresh...)
	SortColumns(cols)
	u.set(id, cols)
	return nil
}

// replace creates or replaces survey id's views from the columns known;
// the caller holds u.mu.
func (u *Upkeep) replace(ctx context.Context, id int64) error {
	query := ViewSQL(u.opts.Database, id, u.viewColumns(id), u.opts.Aliases)
	for _, view := range u.viewNames(id) {
		if err := u.store.ReplaceView(ctx, view, query); err != nil {
			return err
		}
	}
	return nil
}

// seenColumns lists the columns the answers of rec call for that known
// lacks, one per key, with what the first row of each says (strings copied:
// rec's buffers are released after the write).
func seenColumns(rec arrow.RecordBatch, known map[Key]int) map[Key]Column {
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
	var out map[Key]Column
	now := time.Now().UTC().Truncate(time.Second)
	add := func(k Key, i int) {
		if _, ok := known[k]; ok {
			return
		}
		if _, ok := out[k]; ok {
			return
		}
		if out == nil {
			out = map[Key]Column{}
		}
		c := Column{
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
			c.Kind = QuestionKind(c.QuestionType, k.Row != 0)
		}
		out[k] = c
	}
	for i := 0; i < int(rec.NumRows()); i++ {
		k := Key{Survey: survey.Value(i), Question: question.Value(i)}
		if row.IsValid(i) {
			k.Row = row.Value(i)
		}
		add(k, i)
		if other.IsValid(i) {
			add(Key{Survey: k.Survey, Question: k.Question, Part: "other"}, i)
		}
	}
	return out
}
