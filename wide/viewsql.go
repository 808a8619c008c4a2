package wide

import (
	"fmt"
	"strconv"
	"strings"
)

// The SQL of the wide views (ClickHouse, 18.16 and current): the view
// survey_<id> over the responses and answers tables. The upkeep
// (upkeep.go) creates and replaces the views with it; the chdb check runs
// it on a current ClickHouse.

// QuoteIdent quotes an identifier for every supported ClickHouse (18.16
// and current ones read the same escapes in back-quoted names): the
// backslash and the backtick escaped, control bytes as \xHH, so no name
// can end the quotes early or change what follows.
func QuoteIdent(s string) string {
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

// labelExpr is the label of an answer cell: the chosen option, or a matrix
// cell's column.
const labelExpr = "if(choice_label != '', choice_label, column_label)"

// valuesExpr is an answer cell of a question of unknown type, as text.
const valuesExpr = "multiIf(choice_label != '', choice_label, column_label != '', column_label, text != '', text, " +
	"isNotNull(value), toString(assumeNotNull(value)), '')"

// Kind codes inside the view's query.
// (kind < 8: a cell's position and kind travel as one number, pos * 8 + kind).
var kindCodes = map[string]int{KindLabel: 1, KindText: 2, KindNumber: 3, KindLabels: 4, KindFiles: 5, KindValues: 6}

// ViewSQL is the query of survey's wide view over the tables of db
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
func ViewSQL(db string, surveyID int64, cols []Column, aliases bool) string {
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
	labelPos := map[Key]int{}
	for i, c := range cols {
		if c.Kind == KindLabel {
			labelPos[Key{Question: c.QuestionID, Row: c.RowID}] = i + 1
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
			lp := labelPos[Key{Question: c.QuestionID, Row: c.RowID}]
			expr = fmt.Sprintf("if(indexOf(p_, %d) = 0 OR c_[indexOf(p_, %d)] = %s, NULL, toNullable(c_[indexOf(p_, %d)]))",
				lp, lp, noChoiceID, lp)
		case IsArray(c.Kind):
			// a_ is sorted by position: the column's cells are a slice.
			expr = fmt.Sprintf("arraySlice(as_, indexOf(ap_, %d), countEqual(ap_, %d))", p, p)
		default:
			// (One array v_ = arrayMap(i -> s_[indexOf(p_, i)], range(n))
			// on the answers side was a third cheaper to analyse, but the
			// join's table then held it for every response: out of memory
			// on a full scan.)
			expr = fmt.Sprintf("s_[indexOf(p_, %d)]", p)
		}
		fmt.Fprintf(&b, ",\n    %s AS %s", expr, QuoteIdent(c.Name))
	}
	fmt.Fprintf(&b, `
FROM
(
    SELECT
        response_id, toInt64(%d) AS survey_id, r_survey_name AS survey_name, r_response_status AS response_status,
        r_date_created AS date_created, r_date_completed AS date_completed, r_total_time AS total_time,
        r_distribution_id AS distribution_id, r_contact_id AS contact_id, r_contact_id_hash AS contact_id_hash,
        r_ip_address AS ip_address, r_url_names AS `+"`url_parameters.name`"+`, r_url_values AS `+"`url_parameters.value`"+`,
        r_synced_at AS synced_at, r_version_`+viewFormat+` AS _version
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
            argMax(is_deleted, _version) AS r_is_deleted, max(_version) AS r_version_`+viewFormat+`
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
		arrays = arrays || IsArray(c.Kind)
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
		labelExpr, valuesExpr)
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

// viewFormat marks the views this code creates (in an alias of the view's
// query): change it when ViewSQL changes, and running daemons' views are
// replaced at their next start.
const viewFormat = "w2"
