package wide

import (
	"strings"
	"testing"
)

// Every name AssignNames gives passes CheckColumnName (the check applied
// to names read back from wide_columns), whatever the question's variable
// and matrix row look like; hostile names do not.
func TestCheckColumnName(t *testing.T) {
	vars := []string{"", "Spokojenost s úrovní", "1st", "a`b\\c'd\"e\nf", "ß æ ø", "___", strings.Repeat("x", 200),
		"response_id", "survey_id", "q1", "Q1", "😀", "a-b"}
	var taken []Column
	for i, v := range vars {
		for _, row := range []int64{0, 7, -3} {
			for _, part := range []string{PartAnswer, PartOther, PartID} {
				fresh := []Column{{SurveyID: 1, QuestionID: int64(i) - 2, RowID: row, Part: part, Variable: v, RowLabel: v}}
				AssignNames(taken, fresh)
				if err := CheckColumnName(fresh[0].Name); err != nil {
					t.Errorf("variable %q row %d part %q: AssignNames gave %q, which CheckColumnName refuses: %v", v, row, part, fresh[0].Name, err)
				}
				taken = append(taken, fresh[0])
			}
		}
	}
	for _, bad := range []string{"", "a`b", "a\\b", "a'b", "a\"b", "a\nb", "a b", "A", "1a", "_a", "a;DROP", "response_id",
		"url_parameters.name", strings.Repeat("a", 129), "é"} {
		if err := CheckColumnName(bad); err == nil {
			t.Errorf("CheckColumnName(%q): no error", bad)
		}
	}
}
