package clickhouse

import (
	"strings"
	"testing"

	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/survey"
)

var _ warehouse.Eraser = (*Sink)(nil)

func TestGoldenDDLErasures(t *testing.T) {
	got := migrationDDL(t, 75, newTmplData("surveysync", "warehouse", true))
	if !strings.Contains(got, "surveysync.erasures_local ON CLUSTER warehouse") ||
		!strings.Contains(got, "ENGINE = Distributed(warehouse, surveysync, erasures_local, cityHash64(toString(response_id)))") {
		t.Errorf("cluster DDL lacks erasures_local or its Distributed table:\n%s", got)
	}
}

// On a cluster the statements go to the _local tables ON CLUSTER; a
// replicated cluster of a server before 19.1 refuses, and names them.
func TestEraseOnClusterGuard(t *testing.T) {
	keys := []warehouse.ResponseKey{{SurveyID: 1, ResponseID: survey.GUID(guid(1))}}
	for _, tc := range []struct {
		major, minor uint64
		replicated   bool
		refused      bool
		verb         string
	}{
		{18, 16, true, true, "ALTER TABLE"},
		{18, 16, false, false, "ALTER TABLE"},
		{22, 8, true, false, "ALTER TABLE"},
		{23, 3, true, false, "DELETE FROM"},
	} {
		s := &Sink{opts: Options{Database: "surveysync", Cluster: "warehouse"}, tmpl: newTmplData("surveysync", "warehouse", true)}
		s.tmpl.Replicated = tc.replicated
		s.version.Version.Major, s.version.Version.Minor = tc.major, tc.minor
		ids, _ := idList(keys, false)
		strIDs, _ := idList(keys, true)
		if tc.refused {
			err := s.refusal(ids, strIDs)
			if err == nil || !strings.Contains(err.Error(), "refused") || !strings.Contains(err.Error(), "surveysync.answers_local ON CLUSTER warehouse DELETE WHERE") {
				t.Errorf("%d.%d replicated: err = %v, want a refusal naming the statements", tc.major, tc.minor, err)
			}
			continue
		}
		if err := s.refusal(ids, strIDs); err != nil {
			t.Errorf("%d.%d: refused: %v", tc.major, tc.minor, err)
		}
		stmts := s.eraseStatements(ids, strIDs)
		want := tc.verb + " surveysync.answers_local ON CLUSTER warehouse"
		if tc.verb == "ALTER TABLE" {
			want = "ALTER TABLE surveysync.answers_local ON CLUSTER warehouse DELETE WHERE response_id IN (toUUID('" + guid(1) + "'))"
		}
		if !strings.HasPrefix(stmts[0], want) || len(stmts) != len(eraseTables) {
			t.Errorf("%d.%d: statements %q, want the first to start %q", tc.major, tc.minor, stmts, want)
		}
	}
}
