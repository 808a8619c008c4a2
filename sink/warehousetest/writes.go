package warehousetest

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/survey"
)

// testFresh: a new store holds nothing, answers, and takes writes.
func testFresh(t *testing.T, s *suite) {
	c := ctx(t)
	wh := s.wh
	if err := wh.Ping(c); err != nil {
		t.Errorf("Ping: %v", err)
	}
	if wh.String() == "" {
		t.Error("String is empty")
	}
	checks := wh.CheckWrites(c)
	if len(checks) == 0 {
		t.Error("CheckWrites checks nothing")
	}
	for _, ch := range checks {
		if ch.Table == "" || ch.Err != nil {
			t.Errorf("CheckWrites: %+v", ch)
		}
	}
	if has, err := wh.Privacy().HasData(c); err != nil || has {
		t.Errorf("HasData of a new store = %v, %v", has, err)
	}
	if st, err := wh.LoadStates(c); err != nil || len(st) != 0 {
		t.Errorf("LoadStates of a new store = %v, %v", st, err)
	}
	if sv, err := wh.LoadSurveys(c); err != nil || len(sv) != 0 {
		t.Errorf("LoadSurveys of a new store = %v, %v", sv, err)
	}
	if r, err := wh.Privacy().PrivacyRules(c); err != nil || r != nil {
		t.Errorf("PrivacyRules of a new store = %q, %v", r, err)
	}
	if e := wh.Eraser(); e != nil {
		if es, err := e.Erasures(c); err != nil || len(es) != 0 {
			t.Errorf("Erasures of a new store = %v, %v", es, err)
		}
	}
	idx, err := wh.FileIndex()
	if err != nil {
		t.Fatalf("FileIndex: %v", err)
	}
	if p, err := idx.Pending(c, 10); err != nil || len(p) != 0 {
		t.Errorf("Pending of a new store = %v, %v", p, err)
	}
	if got := current(t, wh, surveyWrite); len(got) != 0 {
		t.Errorf("current responses of a new store: %v", got)
	}
	write(t, wh, resp{survey: surveyWrite, n: 99, version: version(0)})
	if has, err := wh.Privacy().HasData(c); err != nil || !has {
		t.Errorf("HasData after a write = %v, %v", has, err)
	}
}

// testParts: each optional part is there or nil as the backend documents.
func testParts(t *testing.T, s *suite) {
	wh, want := s.wh, s.b.Parts
	got := Parts{
		Inventory:  wh.Inventory() != nil,
		WebhookLog: wh.WebhookLog() != nil,
		Eraser:     wh.Eraser() != nil,
		QueryConn:  wh.QueryConn() != nil,
		Leases:     wh.Leases() != nil,
	}
	if inv := wh.Inventory(); inv != nil {
		_, got.RejectInventory = inv.(warehouse.RejectInventory)
	}
	if got != want {
		t.Errorf("parts %+v, the backend documents %+v", got, want)
	}
	if wh.Privacy() == nil {
		t.Error("Privacy is nil")
	}
	if wh.Exporter() == nil {
		t.Error("Exporter is nil")
	}
	for name, open := range map[string]func() error{
		"FileIndex":  func() error { _, err := wh.FileIndex(); return err },
		"FeedLedger": func() error { _, err := wh.FeedLedger(); return err },
	} {
		if err := open(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	// Opened on first use, the same part after.
	a, _ := wh.FileIndex()
	b, _ := wh.FileIndex()
	if a == nil || b == nil {
		t.Error("FileIndex returned nil")
	}
}

// testWriteTwice: the same batch written twice (a retry after an error)
// leaves no visible duplicate in any table.
func testWriteTwice(t *testing.T, s *suite) {
	wh := s.wh
	rs := []resp{
		{survey: surveyWrite, n: 1, version: version(1), contact: 7, upload: true},
		{survey: surveyWrite, n: 2, version: version(1), status: survey.StatusPartial},
		{survey: surveyWrite, n: 3, version: version(1), status: survey.StatusDisqualified, noScale: true},
	}
	b := batch(t, rs...)
	defer b.Release()
	for i := range 2 {
		if err := wh.Write(ctx(t), b); err != nil {
			t.Fatalf("Write #%d: %v", i+1, err)
		}
	}
	want := map[string]string{guid(surveyWrite, 99): survey.StatusCompleted} // Fresh's
	answers := 3                                                             // Fresh's
	for _, r := range rs {
		st := r.status
		if st == "" {
			st = survey.StatusCompleted
		}
		want[r.id()] = st
		answers += r.answers()
	}
	if got := current(t, wh, surveyWrite); !maps.Equal(got, want) {
		t.Errorf("current responses %v, want %v", got, want)
	}
	if rows := exportCSV(t, wh, warehouse.ExportResponses, surveyWrite, time.Time{}); len(rows) != len(want) {
		t.Errorf("export responses: %d rows, want %d", len(rows), len(want))
	}
	if rows := exportCSV(t, wh, warehouse.ExportAnswers, surveyWrite, time.Time{}); len(rows) != answers {
		t.Errorf("export answers: %d rows, want %d", len(rows), answers)
	}
	if rows := exportCSV(t, wh, warehouse.ExportWide, surveyWrite, time.Time{}); len(rows) != len(want) {
		t.Errorf("export wide: %d rows, want %d", len(rows), len(want))
	}
	if inv := wh.Inventory(); inv != nil {
		for _, tc := range []struct {
			survey int64
			id     string
			want   bool
		}{
			{surveyWrite, rs[0].id(), true},
			{surveyWrite, strings.ToUpper(rs[1].id()), true},
			{surveyWrite, guid(surveyWrite, 404), false},
			{surveyVersions, rs[0].id(), false}, // another survey's
		} {
			if got, err := inv.HasResponse(ctx(t), tc.survey, survey.GUID(tc.id)); err != nil || got != tc.want {
				t.Errorf("HasResponse(%d, %s) = %v, %v; want %v", tc.survey, tc.id, got, err, tc.want)
			}
		}
	}
}

// testVersions: a newer version replaces a response's rows (its answers
// too), an older one arriving late changes nothing, and a deletion takes
// the response out of every current row.
func testVersions(t *testing.T, s *suite) {
	wh := s.wh
	v1 := []resp{
		{survey: surveyVersions, n: 1, version: version(10)},
		{survey: surveyVersions, n: 2, version: version(10), status: survey.StatusPartial},
		{survey: surveyVersions, n: 3, version: version(10)},
	}
	write(t, wh, v1...)
	// n=1 completes anew with an answer fewer; n=2 completes; n=3 is
	// deleted; in one batch.
	write(t, wh,
		resp{survey: surveyVersions, n: 1, version: version(20), noScale: true, synced: base.Add(time.Hour)},
		resp{survey: surveyVersions, n: 2, version: version(20), synced: base.Add(time.Hour)},
		resp{survey: surveyVersions, n: 3, version: version(20), deleted: true, synced: base.Add(time.Hour)},
	)
	// An older version of n=2 read late (a slow fetch), partial again.
	write(t, wh, resp{survey: surveyVersions, n: 2, version: version(15), status: survey.StatusPartial})

	want := map[string]string{guid(surveyVersions, 1): survey.StatusCompleted, guid(surveyVersions, 2): survey.StatusCompleted}
	if got := current(t, wh, surveyVersions); !maps.Equal(got, want) {
		t.Errorf("current responses %v, want %v", got, want)
	}
	if inv := wh.Inventory(); inv != nil {
		if ok, err := inv.HasResponse(ctx(t), surveyVersions, survey.GUID(guid(surveyVersions, 3))); err != nil || ok {
			t.Errorf("HasResponse of a deleted response = %v, %v", ok, err)
		}
	}
	ans := exportCSV(t, wh, warehouse.ExportAnswers, surveyVersions, time.Time{})
	if len(ans) != 2+3 {
		t.Errorf("export answers: %d rows, want 5 (the current versions')", len(ans))
	}
	wantEssays := []string{guid(surveyVersions, 1) + "=essay v" + itoa(version(20)), guid(surveyVersions, 2) + "=essay v" + itoa(version(20))}
	var essays []map[string]string
	for _, r := range ans {
		if r["question_id"] == itoa(qEssay) {
			essays = append(essays, r)
		}
	}
	if got := column(essays, "text", true); !slices.Equal(got, wantEssays) {
		t.Errorf("essays %v, want %v", got, wantEssays)
	}
	resps := exportCSV(t, wh, warehouse.ExportResponses, surveyVersions, time.Time{})
	if got, want := column(resps, "_version", true), []string{guid(surveyVersions, 1) + "=" + itoa(version(20)), guid(surveyVersions, 2) + "=" + itoa(version(20))}; !slices.Equal(got, want) {
		t.Errorf("export responses: versions %v, want %v", got, want)
	}
	wideRows := exportCSV(t, wh, warehouse.ExportWide, surveyVersions, time.Time{})
	if got, want := column(wideRows, "zlepseni", true), wantEssays; !slices.Equal(got, want) {
		t.Errorf("export wide: essays %v, want %v", got, want)
	}
	// since: the two written at base+1h; none after.
	if rows := exportCSV(t, wh, warehouse.ExportResponses, surveyVersions, base.Add(time.Hour)); len(rows) != 2 {
		t.Errorf("export responses since the second write: %d rows, want 2", len(rows))
	}
	if rows := exportCSV(t, wh, warehouse.ExportWide, surveyVersions, base.Add(time.Hour+time.Second)); len(rows) != 0 {
		t.Errorf("export wide since after the last write: %d rows, want 0", len(rows))
	}
	if rows := exportCSV(t, wh, warehouse.ExportAnswers, surveyVersions, base.Add(time.Hour)); len(rows) != 5 {
		t.Errorf("export answers since the second write: %d rows, want 5", len(rows))
	}
}
