package wide

import (
	"reflect"
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

func TestSanitizeName(t *testing.T) {
	for in, want := range map[string]string{
		"spokojenost":                "spokojenost",
		"Zlepšení":                   "zlepseni",
		"Spokojenost s úrovní (%)":   "spokojenost_s_urovni",
		"ŽLUŤOUČKÝ kůň":              "zlutoucky_kun",
		"1. otázka":                  "q_1_otazka",
		"  --  ":                     "",
		"Straße":                     "strasse",
		"Q1_nps":                     "q1_nps",
		strings.Repeat("dlouhé", 20): strings.TrimRight(strings.Repeat("dlouhe", 10), "_"),
	} {
		if got := SanitizeName(in); got != want {
			t.Errorf("SanitizeName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestAssignNamesStableAndUnique(t *testing.T) {
	taken := []Column{{QuestionID: 1, Variable: "zlepseni", Name: "zlepseni"}}
	fresh := []Column{
		{QuestionID: 2, Variable: "Zlepšení"},        // sanitises to a taken name
		{QuestionID: 3, Variable: "response_status"}, // a response column's name
		{QuestionID: 4, Variable: "hodnoceni", RowID: 7, RowLabel: "Cena"},
		{QuestionID: 4, Variable: "hodnoceni", RowID: 8, RowLabel: ""},
		{QuestionID: 5, Variable: "zdroj", Part: "other"},
		{QuestionID: 6, Variable: ""},
	}
	AssignNames(taken, fresh)
	var got []string
	for _, c := range fresh {
		got = append(got, c.Name)
	}
	want := []string{"zlepseni_2", "response_status_3", "hodnoceni_cena", "hodnoceni_r8", "zdroj_other", "q6"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("names %v, want %v", got, want)
	}
}
