package clickhouse

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/surveysync/surveysync/pipeline/files"
	"github.com/surveysync/surveysync/pipeline/privacy"
	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/survey"
)

// Privacy rules on an existing warehouse (docs/privacy.md, "Changing the
// rules on an existing warehouse"): the rules in effect are recorded in
// table privacy_rules (migration 0090); ApplyPrivacy rewrites what was
// written under former rules with mutations, as erasure does, each waited
// for until no row it targets is left:
//
//   - a dropped field is emptied (ALTER … UPDATE), a dropped question's
//     answers rows removed (ALTER … DELETE, or DELETE FROM from 23.3);
//   - a hashed value is hashed in Go (ClickHouse 18.16 has no HMAC), for
//     the distinct values still in clear, and replaced by mutations of
//     transform(col, [values], [hashes], col) in slices small enough for
//     the server's max_query_size; a value that already has a hash's form
//     is left, so a run killed midway and run again hashes nothing twice;
//   - webhook bodies are rewritten in Go and replaced by transform on the
//     hash of the body.
//
// On a replicated cluster of a server before 19.1, mutations are refused
// as erasure refuses them.

// privacyRulesID is the id of the one row of privacy_rules.
const privacyRulesID = "rules"

// mutationBytes bounds the text of one mutation (the server's
// max_query_size is 256 KiB by default).
const mutationBytes = 192 << 10

// Privacy returns s.
func (s *Sink) Privacy() warehouse.PrivacyStore { return s }

// PrivacyRules reads the recorded rules; nil when none.
func (s *Sink) PrivacyRules(ctx context.Context) ([]byte, error) {
	table := s.table("privacy_rules")
	rows, err := s.conn.Query(ctx, "SELECT rules FROM "+table+" FINAL WHERE id = '"+privacyRulesID+"' ORDER BY _version DESC LIMIT 1")
	if err != nil {
		return nil, fmt.Errorf("clickhouse: read %s: %w", table, err)
	}
	defer rows.Close()
	var raw string
	if rows.Next() {
		if err := rows.Scan(&raw); err != nil {
			return nil, fmt.Errorf("clickhouse: read %s: %w", table, err)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("clickhouse: read %s: %w", table, err)
	}
	if raw == "" {
		return nil, nil
	}
	return []byte(raw), nil
}

// RecordPrivacyRules writes a new version of the rules.
func (s *Sink) RecordPrivacyRules(ctx context.Context, rules []byte) error {
	table := s.table("privacy_rules")
	batch, err := s.conn.PrepareBatch(s.insertCtx(ctx), "INSERT INTO "+table+" (id, rules, recorded_at, _version)")
	if err != nil {
		return fmt.Errorf("clickhouse: write %s: %w", table, err)
	}
	defer batch.Close()
	if err := batch.Append(privacyRulesID, string(rules), time.Now().UTC(), s.nextVersion()); err != nil {
		return fmt.Errorf("clickhouse: write %s: %w", table, err)
	}
	if err := batch.Send(); err != nil {
		return fmt.Errorf("clickhouse: write %s: %w", table, err)
	}
	return nil
}

// HasData reports whether responses holds a row.
func (s *Sink) HasData(ctx context.Context) (bool, error) {
	var n uint64
	if err := s.conn.QueryRow(ctx, "SELECT count() FROM "+s.table("responses")).Scan(&n); err != nil {
		return false, fmt.Errorf("clickhouse: count %s: %w", s.table("responses"), err)
	}
	return n > 0, nil
}

// question is one question as answers names it.
type question struct {
	survey, id   int64
	qtype, varbl string
}

func (q question) tuple() string {
	return fmt.Sprintf("(%d, %d, %s, %s)", q.survey, q.id, quoteString(q.qtype), quoteString(q.varbl))
}

const questionTuple = "(survey_id, question_id, question_type, variable)"

func tuples(qs []question) string {
	parts := make([]string, len(qs))
	for i, q := range qs {
		parts[i] = q.tuple()
	}
	return strings.Join(parts, ", ")
}

// ApplyPrivacy rewrites the rows written under former rules (see above).
func (s *Sink) ApplyPrivacy(ctx context.Context, d *privacy.Delta, deleteObjects func(context.Context, []files.FileRef) error) (map[string]int64, error) {
	a := &applier{s: s, d: d, changed: map[string]int64{}}
	steps := []func(context.Context) error{a.questions(deleteObjects), a.responses, a.ledger, a.webhooks}
	for _, step := range steps {
		if err := step(ctx); err != nil {
			return a.changed, err
		}
	}
	return a.changed, nil
}

type applier struct {
	s       *Sink
	d       *privacy.Delta
	changed map[string]int64
}

// mutate runs one mutation of table (set: "UPDATE …" or "" to delete)
// of the rows where, unless none is there, and waits until none is left
// (every statement's where selects only rows it changes).
func (a *applier) mutate(ctx context.Context, table, set, where string) error {
	s := a.s
	n, err := s.count(ctx, table, where)
	if err != nil || n == 0 {
		return err
	}
	a.changed[table] += n
	var stmt string
	switch {
	case set != "":
		stmt = fmt.Sprintf("ALTER TABLE %s%s UPDATE %s WHERE %s", s.tmpl.Local(table), s.tmpl.OnCluster, set, where)
	case s.lightweightDelete():
		stmt = fmt.Sprintf("DELETE FROM %s%s WHERE %s", s.tmpl.Local(table), s.tmpl.OnCluster, where)
	default:
		stmt = fmt.Sprintf("ALTER TABLE %s%s DELETE WHERE %s", s.tmpl.Local(table), s.tmpl.OnCluster, where)
	}
	if why := s.mutationsRefused(); why != "" {
		return fmt.Errorf("clickhouse: privacy apply refused on cluster %s: %s; stop the daemons and run at a quiet time (or after an upgrade) the mutations it needs, then surveysync privacy apply again to record the rules; the first: %s",
			s.opts.Cluster, why, redactMutation(stmt))
	}
	if err := s.execDDL(s.ddlCtx(ctx), stmt); err != nil {
		return fmt.Errorf("clickhouse: privacy apply to %s: %w", s.table(table), err)
	}
	wait := 50 * time.Millisecond
	for {
		left, err := s.count(ctx, table, where)
		if err != nil {
			return err
		}
		if left == 0 {
			return nil
		}
		if reason := s.mutationFailure(ctx, table); reason != "" {
			return fmt.Errorf("clickhouse: privacy apply to %s: the mutation failed: %s", s.table(table), reason)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("clickhouse: privacy apply to %s: %d rows still to change: %w", s.table(table), left, ctx.Err())
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// redactMutation keeps a statement printable: values in clear (the
// arrays of transform) are not shown.
func redactMutation(stmt string) string {
	if i := strings.Index(stmt, "transform("); i >= 0 {
		return stmt[:i] + "transform(… values not shown …)"
	}
	return stmt
}

// quoteAll quotes numbers as strings: "1, 2" → "'1', '2'".
func quoteAll(nums []string) string {
	q := make([]string, len(nums))
	for i, n := range nums {
		q[i] = quoteString(n)
	}
	return strings.Join(q, ", ")
}

func (s *Sink) count(ctx context.Context, table, where string) (int64, error) {
	var n uint64
	q := fmt.Sprintf("SELECT count() FROM %s WHERE %s", s.table(table), where)
	if err := s.conn.QueryRow(ctx, q).Scan(&n); err != nil {
		return 0, fmt.Errorf("clickhouse: privacy apply: count rows of %s: %w", s.table(table), err)
	}
	return int64(n), nil
}

// column reads a query's one String column.
func (s *Sink) column(ctx context.Context, q string) ([]string, error) {
	out, err := s.strings(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("clickhouse: privacy apply: %w", err)
	}
	return out, nil
}

// hashMutations replaces, in slices, each value of col (a String
// expression) in values that is not a hash yet by its hash: for each
// slice, set(transform) and where(in-list) make one mutation.
func (a *applier) hashMutations(ctx context.Context, table string, values []string, hash func(string) string,
	stmt func(transform, in string) (set, where string)) error {
	var from, to []string
	size := 0
	flush := func() error {
		if len(from) == 0 {
			return nil
		}
		set, where := stmt(fmt.Sprintf("[%s], [%s]", strings.Join(from, ", "), strings.Join(to, ", ")), strings.Join(from, ", "))
		from, to, size = from[:0], to[:0], 0
		return a.mutate(ctx, table, set, where)
	}
	for _, v := range values {
		if privacy.IsHash(v) {
			continue
		}
		q, h := quoteString(v), quoteString(hash(v))
		if size+2*len(q)+len(h) > mutationBytes {
			if err := flush(); err != nil {
				return err
			}
		}
		from, to = append(from, q), append(to, h)
		size += 2*len(q) + len(h) + 6
	}
	return flush()
}

// responses applies the field rules to responses.
func (a *applier) responses(ctx context.Context) error {
	d := a.d
	switch d.Field("ip_address") {
	case privacy.Drop, privacy.Clear:
		if err := a.mutate(ctx, "responses", "ip_address = ''", "ip_address != ''"); err != nil {
			return err
		}
	case privacy.Hash:
		vals, err := a.s.column(ctx, "SELECT DISTINCT ip_address FROM "+a.s.table("responses")+" WHERE ip_address != '' ORDER BY ip_address")
		if err != nil {
			return err
		}
		if err := a.hashMutations(ctx, "responses", vals, d.Hash, func(tr, in string) (string, string) {
			return "ip_address = transform(ip_address, " + tr + ", ip_address)", "ip_address IN (" + in + ")"
		}); err != nil {
			return err
		}
	}
	if d.Field("distribution_id") == privacy.Drop {
		if err := a.mutate(ctx, "responses", "distribution_id = NULL", "distribution_id IS NOT NULL"); err != nil {
			return err
		}
	}
	if err := a.contacts(ctx, "responses", "contact_id IS NOT NULL", "assumeNotNull(contact_id)", "NULL"); err != nil {
		return err
	}
	if d.Params() {
		return a.urlParameters(ctx)
	}
	return nil
}

// contacts applies contact_id's rule to table (responses or
// pushed_contacts): present is the condition of a row with an id, id its
// value, none what an absent id is.
func (a *applier) contacts(ctx context.Context, table, present, id, none string) error {
	switch a.d.Field("contact_id") {
	case privacy.Drop:
		return a.mutate(ctx, table, "contact_id = "+none+", contact_id_hash = ''", present+" OR contact_id_hash != ''")
	case privacy.Clear:
		return a.mutate(ctx, table, "contact_id_hash = ''", "contact_id_hash != ''")
	case privacy.Hash:
		ids, err := a.s.column(ctx, fmt.Sprintf("SELECT DISTINCT toString(%s) FROM %s WHERE %s", id, a.s.table(table), present))
		if err != nil {
			return err
		}
		sort.Strings(ids)
		var from, to []string
		flush := func() error {
			if len(from) == 0 {
				return nil
			}
			in := strings.Join(from, ", ")
			set := fmt.Sprintf("contact_id_hash = transform(toString(%s), [%s], [%s], contact_id_hash), contact_id = %s", id, quoteAll(from), strings.Join(to, ", "), none)
			from, to = from[:0], to[:0]
			return a.mutate(ctx, table, set, fmt.Sprintf("%s AND %s IN (%s)", present, id, in))
		}
		for _, v := range ids {
			var n int64
			if _, err := fmt.Sscan(v, &n); err != nil {
				return fmt.Errorf("clickhouse: privacy apply: a contact id of %s is not a number", a.s.table(table))
			}
			from, to = append(from, v), append(to, quoteString(a.d.HashInt(n)))
			if len(from) >= 2000 {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		return flush()
	}
	return nil
}

// urlParameters applies the URL parameter rules: by name, drop removes
// the parameter, clear empties its value, hash hashes it.
func (a *applier) urlParameters(ctx context.Context) error {
	names, err := a.s.column(ctx, "SELECT DISTINCT arrayJoin(url_parameters.name) AS n FROM "+a.s.table("responses")+" ORDER BY n")
	if err != nil {
		return err
	}
	var drop, clear, hash []string
	for _, n := range names {
		switch a.d.Param(n) {
		case privacy.Drop:
			drop = append(drop, quoteString(n))
		case privacy.Clear:
			clear = append(clear, quoteString(n))
		case privacy.Hash:
			hash = append(hash, quoteString(n))
		}
	}
	if len(drop) > 0 {
		in := strings.Join(drop, ", ")
		set := fmt.Sprintf("`url_parameters.value` = arrayFilter((v, n) -> n NOT IN (%[1]s), `url_parameters.value`, `url_parameters.name`), "+
			"`url_parameters.name` = arrayFilter(n -> n NOT IN (%[1]s), `url_parameters.name`)", in)
		if err := a.mutate(ctx, "responses", set, fmt.Sprintf("hasAny(`url_parameters.name`, [%s])", in)); err != nil {
			return err
		}
	}
	if len(clear) > 0 {
		in := strings.Join(clear, ", ")
		set := fmt.Sprintf("`url_parameters.value` = arrayMap((v, n) -> if(n IN (%s), '', v), `url_parameters.value`, `url_parameters.name`)", in)
		where := fmt.Sprintf("arrayExists((v, n) -> n IN (%s) AND v != '', `url_parameters.value`, `url_parameters.name`)", in)
		if err := a.mutate(ctx, "responses", set, where); err != nil {
			return err
		}
	}
	if len(hash) > 0 {
		in := strings.Join(hash, ", ")
		vals, err := a.s.column(ctx, fmt.Sprintf("SELECT DISTINCT v FROM %s ARRAY JOIN `url_parameters.name` AS n, `url_parameters.value` AS v WHERE n IN (%s) ORDER BY v",
			a.s.table("responses"), in))
		if err != nil {
			return err
		}
		return a.hashMutations(ctx, "responses", vals, a.d.Hash, func(tr, values string) (string, string) {
			return fmt.Sprintf("`url_parameters.value` = arrayMap((v, n) -> if(n IN (%s), transform(v, %s, v), v), `url_parameters.value`, `url_parameters.name`)", in, tr),
				fmt.Sprintf("arrayExists((v, n) -> n IN (%s) AND v IN (%s), `url_parameters.value`, `url_parameters.name`)", in, values)
		})
	}
	return nil
}

// questions applies the question rules to answers, and removes the files
// of dropped upload questions (objects first, then their index rows, then
// the answers that name them: a run killed midway finds them again).
func (a *applier) questions(deleteObjects func(context.Context, []files.FileRef) error) func(context.Context) error {
	return func(ctx context.Context) error {
		if !a.d.Questions() {
			return nil
		}
		rows, err := a.s.conn.Query(ctx, "SELECT DISTINCT survey_id, question_id, question_type, variable FROM "+a.s.table("answers"))
		if err != nil {
			return fmt.Errorf("clickhouse: privacy apply: list the questions of %s: %w", a.s.table("answers"), err)
		}
		var drop, hash, clear []question
		for rows.Next() {
			var q question
			if err := rows.Scan(&q.survey, &q.id, &q.qtype, &q.varbl); err != nil {
				rows.Close()
				return fmt.Errorf("clickhouse: privacy apply: %w", err)
			}
			switch a.d.Question(q.survey, q.id, q.qtype, q.varbl) {
			case privacy.Drop:
				drop = append(drop, q)
			case privacy.Hash:
				hash = append(hash, q)
			case privacy.Clear:
				clear = append(clear, q)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("clickhouse: privacy apply: %w", err)
		}
		if len(drop) > 0 {
			if err := a.droppedFiles(ctx, drop, deleteObjects); err != nil {
				return err
			}
			if err := a.mutate(ctx, "answers", "", questionTuple+" IN ("+tuples(drop)+")"); err != nil {
				return err
			}
		}
		if len(clear) > 0 {
			if err := a.mutate(ctx, "answers", "text = ''", questionTuple+" IN ("+tuples(clear)+") AND text != ''"); err != nil {
				return err
			}
		}
		if len(hash) > 0 {
			return a.hashAnswers(ctx, hash)
		}
		return nil
	}
}

// hashAnswers hashes the answers of questions as new writes do: text,
// else the value in decimal (into text); value emptied.
func (a *applier) hashAnswers(ctx context.Context, qs []question) error {
	in := questionTuple + " IN (" + tuples(qs) + ")"
	// Values alone first: their hash goes to text.
	vals, err := a.s.column(ctx, "SELECT DISTINCT toString(assumeNotNull(value)) FROM "+a.s.table("answers")+" WHERE "+in+" AND text = '' AND value IS NOT NULL")
	if err != nil {
		return err
	}
	sort.Strings(vals)
	var from, to []string
	flush := func() error {
		if len(from) == 0 {
			return nil
		}
		ins := strings.Join(from, ", ")
		set := fmt.Sprintf("text = transform(toString(assumeNotNull(value)), [%s], [%s], text), value = NULL", quoteAll(from), strings.Join(to, ", "))
		from, to = from[:0], to[:0]
		return a.mutate(ctx, "answers", set, in+" AND text = '' AND value IN ("+ins+")")
	}
	for _, v := range vals {
		var n int64
		if _, err := fmt.Sscan(v, &n); err != nil {
			return fmt.Errorf("clickhouse: privacy apply: an answer value is not a number")
		}
		from, to = append(from, v), append(to, quoteString(a.d.HashInt(n)))
		if len(from) >= 2000 {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := flush(); err != nil {
		return err
	}
	texts, err := a.s.column(ctx, "SELECT DISTINCT text FROM "+a.s.table("answers")+" WHERE "+in+" AND text != '' ORDER BY text")
	if err != nil {
		return err
	}
	if err := a.hashMutations(ctx, "answers", texts, a.d.Hash, func(tr, values string) (string, string) {
		return "text = transform(text, " + tr + ", text)", in + " AND text IN (" + values + ")"
	}); err != nil {
		return err
	}
	return a.mutate(ctx, "answers", "value = NULL", in+" AND value IS NOT NULL")
}

// droppedFiles deletes the objects of the dropped questions' uploaded
// files, then their index rows.
func (a *applier) droppedFiles(ctx context.Context, qs []question, deleteObjects func(context.Context, []files.FileRef) error) error {
	pairs := make([]string, len(qs))
	for i, q := range qs {
		pairs[i] = fmt.Sprintf("(%d, %d)", q.survey, q.id)
	}
	where := "(survey_id, question_id) IN (" + strings.Join(pairs, ", ") + ")"
	if deleteObjects != nil {
		rows, err := a.s.conn.Query(ctx, "SELECT DISTINCT survey_id, toString(response_id), question_id, toString(file_id) FROM "+a.s.table("uploaded_files")+" WHERE "+where)
		if err != nil {
			return fmt.Errorf("clickhouse: privacy apply: list the files of dropped questions: %w", err)
		}
		var refs []files.FileRef
		for rows.Next() {
			var r files.FileRef
			var rid, fid string
			if err := rows.Scan(&r.SurveyID, &rid, &r.QuestionID, &fid); err != nil {
				rows.Close()
				return fmt.Errorf("clickhouse: privacy apply: %w", err)
			}
			if _, err := uuid.Parse(rid); err != nil {
				continue
			}
			r.ResponseID, r.FileID = survey.GUID(rid), survey.GUID(fid)
			refs = append(refs, r)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("clickhouse: privacy apply: %w", err)
		}
		if len(refs) > 0 {
			if err := deleteObjects(ctx, refs); err != nil {
				return err
			}
			a.changed["objects"] += int64(len(refs))
		}
	}
	return a.mutate(ctx, "uploaded_files", "", where)
}

// ledger applies contact_id's rule to pushed_contacts.
func (a *applier) ledger(ctx context.Context) error {
	return a.contacts(ctx, "pushed_contacts", "contact_id != 0", "contact_id", "0")
}

// webhooks rewrites the stored webhook bodies with the field rules.
func (a *applier) webhooks(ctx context.Context) error {
	d := a.d
	if d.Field("ip_address") == privacy.Keep && d.Field("contact_id") == privacy.Keep && d.Field("distribution_id") == privacy.Keep && !d.Params() {
		return nil
	}
	table := a.s.table("webhook_events")
	rows, err := a.s.conn.Query(ctx, "SELECT DISTINCT event_id, cityHash64(body), body FROM "+table)
	if err != nil {
		return fmt.Errorf("clickhouse: privacy apply: read %s: %w", table, err)
	}
	type change struct {
		id   string
		sum  uint64
		body string
	}
	var changes []change
	for rows.Next() {
		var c change
		var body string
		if err := rows.Scan(&c.id, &c.sum, &body); err != nil {
			rows.Close()
			return fmt.Errorf("clickhouse: privacy apply: read %s: %w", table, err)
		}
		if nb := d.WebhookBody([]byte(body)); string(nb) != body {
			c.body = string(nb)
			changes = append(changes, c)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("clickhouse: privacy apply: read %s: %w", table, err)
	}
	var ids, sums, bodies []string
	size := 0
	flush := func() error {
		if len(ids) == 0 {
			return nil
		}
		set := fmt.Sprintf("body = transform(cityHash64(body), [%s], [%s], body)", strings.Join(sums, ", "), strings.Join(bodies, ", "))
		where := fmt.Sprintf("event_id IN (%s) AND cityHash64(body) IN (%s)", strings.Join(ids, ", "), strings.Join(sums, ", "))
		ids, sums, bodies, size = ids[:0], sums[:0], bodies[:0], 0
		return a.mutate(ctx, "webhook_events", set, where)
	}
	for _, c := range changes {
		id, sum, body := quoteString(c.id), fmt.Sprintf("toUInt64(%d)", c.sum), quoteString(c.body)
		if size+len(id)+len(sum)*2+len(body) > mutationBytes {
			if err := flush(); err != nil {
				return err
			}
		}
		ids, sums, bodies = append(ids, id), append(sums, sum), append(bodies, body)
		size += len(id) + 2*len(sum) + len(body) + 6
	}
	return flush()
}
