// Package wide is the model of surveysync's wide tables (issue 21,
// docs/schema.md "Wide tables"): one row per response, one typed column per
// question. It names and types the columns (the same in ClickHouse's views
// survey_<id> and in exports from the Parquet sink), and writes wide rows as
// CSV or Parquet, streaming (Writer).
package wide

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

	"golang.org/x/text/unicode/norm"
)

// Column kinds (wide_columns.column_kind) and the ClickHouse type each gives.
const (
	KindLabel  = "label"  // single choice, a matrix row with one answer: the chosen label
	KindLabels = "labels" // multiple choice, a matrix row with several: the labels, in answer order
	KindNumber = "number" // scale, NPS, number: the value
	KindText   = "text"   // open text, URL parameter question
	KindFiles  = "files"  // file upload: the file ids (uploaded_files.file_id as text)
	KindOther  = "other"  // the "other" text of a choice question
	KindValues = "values" // a question type surveysync does not know: every answer as text
	// KindChoiceID is the id beside a label column (single choice, a matrix
	// row with one answer) when choice ids are asked for (wide.choice_ids):
	// the chosen option's id, or the matrix column's.
	KindChoiceID = "choice_id"
)

var kindTypes = map[string]string{
	KindLabel:    "String",
	KindLabels:   "Array(String)",
	KindNumber:   "Nullable(Int64)",
	KindText:     "String",
	KindFiles:    "Array(String)",
	KindOther:    "String",
	KindValues:   "Array(String)",
	KindChoiceID: "Nullable(Int64)",
}

// QuestionKind maps the service's question type to a column kind; hasRows
// tells whether its answers carry matrix rows (a column per row).
func QuestionKind(qtype string, hasRows bool) string {
	t := strings.ToLower(qtype)
	switch {
	case strings.Contains(t, "file") || strings.Contains(t, "upload"):
		return KindFiles
	case strings.Contains(t, "multi") || strings.Contains(t, "checkbox"):
		return KindLabels
	case t == "single" || strings.Contains(t, "single") || strings.Contains(t, "radio") ||
		strings.Contains(t, "dropdown") || strings.Contains(t, "select"):
		return KindLabel
	case strings.Contains(t, "scale") || strings.Contains(t, "nps") || strings.Contains(t, "number") ||
		strings.Contains(t, "numeric") || strings.Contains(t, "slider") || strings.Contains(t, "rating"):
		return KindNumber
	case strings.Contains(t, "essay") || strings.Contains(t, "text") || strings.Contains(t, "open") ||
		strings.Contains(t, "url_parameter") || strings.Contains(t, "email"):
		if hasRows {
			return KindValues
		}
		return KindText
	case strings.Contains(t, "matrix"):
		return KindLabel
	}
	return KindValues
}

// Parts of a question's (or matrix row's) columns.
const (
	PartAnswer = ""      // the answer
	PartOther  = "other" // the "other" text
	PartID     = "id"    // the chosen option's id, beside a label (KindChoiceID)
)

// Column is one column of a wide view (a row of ClickHouse's wide_columns).
type Column struct {
	SurveyID   int64
	QuestionID int64
	RowID      int64  // the matrix row; 0 for a question without rows
	Part       string // "" the answer, "other" the "other" text, "id" the chosen option's id
	Name       string // the column's name in the view
	Kind       string
	// Last seen:
	QuestionType  string
	Variable      string
	Title         string
	RowLabel      string
	PageIndex     uint16
	QuestionIndex uint16
	FirstSeen     time.Time
}

// Type is the column's ClickHouse type.
func (c Column) Type() string { return TypeOf(c.Kind) }

// TypeOf is the ClickHouse type of a column of kind k ("" for an unknown
// kind).
func TypeOf(k string) string { return kindTypes[k] }

// IsArray reports whether columns of kind k are arrays of strings.
func IsArray(k string) bool { return k == KindLabels || k == KindFiles || k == KindValues }

// Key identifies a column: survey, question, matrix row, part.
type Key struct {
	Survey, Question, Row int64
	Part                  string
}

// Key is c's key.
func (c Column) Key() Key { return Key{c.SurveyID, c.QuestionID, c.RowID, c.Part} }

// ViewName is the name of survey id's wide view.
func ViewName(surveyID int64) string {
	if surveyID < 0 {
		return "survey_m" + strconv.FormatInt(-surveyID, 10)
	}
	return "survey_" + strconv.FormatInt(surveyID, 10)
}

// ResponseColumns are the response's columns, first in every wide view;
// no question column takes their names.
var ResponseColumns = []string{
	"response_id", "survey_id", "survey_name", "response_status", "date_created", "date_completed", "total_time",
	"distribution_id", "contact_id", "contact_id_hash", "ip_address", "url_parameters.name", "url_parameters.value",
	"synced_at", "_version",
}

// maxNameLen bounds a column name's length (before a suffix).
const maxNameLen = 60

// translit spells letters that do not decompose into ASCII plus accents.
var translit = map[rune]string{
	'ß': "ss", 'æ': "ae", 'Æ': "ae", 'ø': "o", 'Ø': "o", 'đ': "d", 'Đ': "d", 'ł': "l", 'Ł': "l",
	'œ': "oe", 'Œ': "oe", 'þ': "th", 'ð': "d", 'ı': "i",
}

// SanitizeName makes a column name of s: ASCII lower case, digits and "_"
// (Czech and other accented letters lose their accents: "Spokojenost s
// úrovní" is spokojenost_s_urovni), no leading digit, at most maxNameLen
// characters. "" when nothing is left.
func SanitizeName(s string) string {
	var b strings.Builder
	under := false
	for _, r := range norm.NFD.String(s) {
		if unicode.Is(unicode.Mn, r) {
			continue
		}
		var out string
		switch {
		case r < 128 && (unicode.IsLetter(r) || unicode.IsDigit(r)):
			out = string(unicode.ToLower(r))
		case translit[r] != "":
			out = translit[r]
		default:
			if b.Len() > 0 {
				under = true
			}
			continue
		}
		if under {
			b.WriteByte('_')
			under = false
		}
		b.WriteString(out)
	}
	name := b.String()
	if name != "" && name[0] >= '0' && name[0] <= '9' {
		name = "q_" + name
	}
	if len(name) > maxNameLen {
		name = strings.TrimRight(name[:maxNameLen], "_")
	}
	return name
}

// baseName is the name c would like: from the variable (else "q<id>"), a
// matrix row's label (else "r<row id>"), "_other" for the other text.
func (c Column) baseName() string {
	base := SanitizeName(c.Variable)
	if base == "" {
		base = "q" + strconv.FormatInt(c.QuestionID, 10)
	}
	if c.RowID != 0 {
		row := SanitizeName(c.RowLabel)
		if row == "" {
			row = "r" + strconv.FormatInt(c.RowID, 10)
		}
		base = SanitizeName(base + "_" + row)
	}
	switch c.Part {
	case PartOther:
		base += "_other"
	case PartID:
		base += "_id"
	}
	return base
}

// AssignNames names the columns of fresh (no Name yet) so that no two
// columns of the survey share a name, keeping the names of taken. A name
// already taken gets the question's (or matrix row's) id appended, then a
// counter: which column keeps the plain name depends only on the order in
// which surveysync first saw them, and never changes afterwards. A
// choice-id column (PartID) is named after its label column: <name>_id.
func AssignNames(taken []Column, fresh []Column) {
	used := map[string]bool{}
	for _, n := range ResponseColumns {
		used[n] = true
	}
	names := map[Key]string{}
	for _, c := range taken {
		used[c.Name] = true
		names[c.Key()] = c.Name
	}
	assign := func(c *Column, base string) {
		name := base
		if used[name] {
			id := c.QuestionID
			if c.RowID != 0 {
				id = c.RowID
			}
			name = fmt.Sprintf("%s_%d", base, id)
		}
		for k := 2; used[name]; k++ {
			name = fmt.Sprintf("%s_%d_%d", base, c.QuestionID, k)
		}
		used[name] = true
		c.Name = name
		names[c.Key()] = name
	}
	for i := range fresh {
		if fresh[i].Part != PartID {
			assign(&fresh[i], fresh[i].baseName())
		}
	}
	for i := range fresh {
		c := &fresh[i]
		if c.Part != PartID {
			continue
		}
		base := c.baseName()
		k := c.Key()
		k.Part = PartAnswer
		if label, ok := names[k]; ok {
			base = label + "_id"
		}
		assign(c, base)
	}
}

// maxColumnName bounds a stored column name: AssignNames gives at most
// maxNameLen characters plus "_other" or "_id" and two numeric suffixes.
const maxColumnName = 128

// columnNameRE is every name AssignNames can give: SanitizeName's letters,
// digits and "_" (never a leading digit or "_"), or "q<id>", then the
// suffixes "_other", "_id", "_<id>" and "_<id>_<n>" (an id may be
// negative).
var columnNameRE = regexp.MustCompile(`^[a-z][a-z0-9_-]*$`)

// CheckColumnName reports whether name is a column name surveysync gives
// (AssignNames): a stored name that is not (a wide_columns row written by
// something else, or copied from another server) must not reach SQL or a
// file's header as it is.
func CheckColumnName(name string) error {
	switch {
	case len(name) > maxColumnName:
		return fmt.Errorf("column name %q: longer than %d bytes", name, maxColumnName)
	case !columnNameRE.MatchString(name):
		return fmt.Errorf("column name %q: not one surveysync gives (must match %s)", name, columnNameRE)
	case slices.Contains(ResponseColumns, name):
		return fmt.Errorf("column name %q: taken by the response's own column", name)
	}
	return nil
}

// SortColumns orders columns as the questionnaire does: page, question,
// then matrix rows and the "other" text after their question, in the order
// first seen.
func SortColumns(cols []Column) {
	sort.SliceStable(cols, func(i, j int) bool {
		a, b := cols[i], cols[j]
		if a.PageIndex != b.PageIndex {
			return a.PageIndex < b.PageIndex
		}
		if a.QuestionIndex != b.QuestionIndex {
			return a.QuestionIndex < b.QuestionIndex
		}
		if a.QuestionID != b.QuestionID {
			return a.QuestionID < b.QuestionID
		}
		if a.Part != b.Part {
			return a.Part < b.Part
		}
		return a.RowID < b.RowID
	})
}

// reservedNames are the names of surveysync's own tables and views, which
// no friendly view name may take.
var reservedNames = map[string]bool{
	"responses": true, "answers": true, "responses_current": true, "answers_current": true, "surveys": true,
	"surveys_current": true, "sync_state": true, "sync_state_current": true, "sync_progress": true,
	"uploaded_files": true, "uploaded_files_current": true, "webhook_events": true, "pushed_contacts": true,
	"message_sends": true, "rejects": true, "schema_migrations": true, "wide_columns": true,
	"wide_columns_current": true, "leader_lease": true,
}

// viewNameRE is what a friendly view name may look like.
var viewNameRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// CheckViewName reports whether name can be a survey's friendly view
// name: lower-case letters, digits and _, not starting with a digit, not
// survey_<digits> (another survey's view), not one of surveysync's tables,
// not ending in _local, __new or __old (the cluster's and the swap's).
func CheckViewName(name string) error {
	switch {
	case !viewNameRE.MatchString(name):
		return fmt.Errorf("wide view name %q: must match %s", name, viewNameRE)
	case reservedNames[name], strings.HasSuffix(name, "_local"), strings.HasSuffix(name, "__new"), strings.HasSuffix(name, "__old"):
		return fmt.Errorf("wide view name %q: taken by surveysync's own tables", name)
	case strings.HasPrefix(name, "survey_") && strings.TrimLeft(strings.TrimPrefix(name, "survey_"), "m0123456789") == "":
		return fmt.Errorf("wide view name %q: survey_<id> names are the surveys' own views", name)
	}
	return nil
}
