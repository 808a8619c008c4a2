package warehousetest

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/surveysync/surveysync/pipeline/files"
	"github.com/surveysync/surveysync/pipeline/privacy"
	"github.com/surveysync/surveysync/record"
	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/survey"
)

// testPrivacy, on a store of its own: the rules read back as recorded;
// ApplyPrivacy rewrites the rows written under looser rules — a field
// dropped, the contact id and an essay question hashed, an upload question
// dropped with its files (deleteObjects is called with them first) — in
// the responses, the answers, the feed ledger and the file index, leaves
// other surveys' questions alone, and a second run changes nothing.
func testPrivacy(t *testing.T, s *suite) {
	wh := s.b.NewStore(t)(t)
	defer func() {
		if err := wh.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	}()
	c := ctx(t)
	ps := wh.Privacy()
	other := int64(surveyPrivacy + 1)
	write(t, wh,
		resp{survey: surveyPrivacy, n: 1, version: version(1), contact: 7001, upload: true, essay: "Jan Novák, tel. 777 123 456"},
		resp{survey: surveyPrivacy, n: 2, version: version(1), contact: 7002},
		resp{survey: other, n: 1, version: version(1), contact: 7003, upload: true, essay: "jiný průzkum"},
	)
	idx, err := wh.FileIndex()
	if err != nil {
		t.Fatal(err)
	}
	ref := func(surveyID int64) files.FileRef {
		return files.FileRef{SurveyID: surveyID, ResponseID: survey.GUID(guid(surveyID, 1)), QuestionID: qUpload, FileID: fileID(surveyID, 1)}
	}
	for _, sid := range []int64{surveyPrivacy, other} {
		if err := idx.Record(c, []files.Record{{FileRef: ref(sid), ObjectURL: "s3://prilohy/" + ref(sid).Key(),
			SHA256: strings.Repeat("ab", 32), Size: 5, StoredAt: base, Version: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	l, err := wh.FeedLedger()
	if err != nil {
		t.Fatal(err)
	}
	if err := l.RecordContacts(c, []record.ContactEntry{
		{Feed: "suite_privacy", Key: "jana@example.cz", DistributionID: 1, State: stPushed, ContactID: 7001, BatchID: "b", UpdatedAt: base, Version: 1},
	}); err != nil {
		t.Fatal(err)
	}

	if raw, err := ps.PrivacyRules(c); err != nil || raw != nil {
		t.Fatalf("PrivacyRules before any record = %q, %v", raw, err)
	}
	key := []byte("klíč pro testy, 32 bajtů nejméně!")
	oldRules := privacy.Options{}.Rules()
	newRules := privacy.Options{Key: key, IPAddress: privacy.Drop, ContactID: privacy.Hash, Questions: []privacy.Rule{
		{Survey: surveyPrivacy, Question: qEssay, Action: privacy.Hash},
		{Survey: surveyPrivacy, Question: qUpload, Action: privacy.Drop},
	}}.Rules()
	recordRules := func(r privacy.Rules) {
		t.Helper()
		raw, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if err := ps.RecordPrivacyRules(c, raw); err != nil {
			t.Fatal(err)
		}
		got, err := ps.PrivacyRules(c)
		if err != nil {
			t.Fatal(err)
		}
		var back privacy.Rules
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("PrivacyRules: %q: %v", got, err)
		}
		if diff := cmp.Diff(r, back); diff != "" {
			t.Errorf("PrivacyRules (-recorded +read):\n%s", diff)
		}
	}
	recordRules(oldRules)

	d := privacy.NewDelta(oldRules, newRules, key)
	var deleted []files.FileRef
	deleteObjects := func(_ context.Context, refs []files.FileRef) error {
		deleted = append(deleted, refs...)
		return nil
	}
	if s.b.MutationsRefused != "" {
		if _, err := ps.ApplyPrivacy(c, d, deleteObjects); err == nil || !strings.Contains(err.Error(), s.b.MutationsRefused) {
			t.Errorf("ApplyPrivacy = %v, want the refusal %q", err, s.b.MutationsRefused)
		}
		return
	}
	// deleteObjects failing: the index keeps the files' rows.
	if _, err := ps.ApplyPrivacy(c, d, func(context.Context, []files.FileRef) error { return errors.New("úložiště nedostupné") }); err == nil {
		t.Error("ApplyPrivacy succeeded though deleteObjects failed")
	}
	if got, err := idx.FilesOf(c, surveyPrivacy, ref(surveyPrivacy).ResponseID); err != nil || len(got) != 1 {
		t.Errorf("the file index after deleteObjects failed: %v, %v; want its row kept", got, err)
	}

	changed, err := ps.ApplyPrivacy(c, d, deleteObjects)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ApplyPrivacy changed %v", changed)
	if diff := cmp.Diff([]files.FileRef{ref(surveyPrivacy)}, deleted); diff != "" {
		t.Errorf("deleteObjects (-want +got):\n%s", diff)
	}
	for _, table := range []string{"responses", "answers", "pushed_contacts", "uploaded_files"} {
		if changed[table] == 0 {
			t.Errorf("ApplyPrivacy changed no row of %s: %v", table, changed)
		}
	}

	// The responses: no IP address, the contact id's hash.
	for _, sid := range []int64{surveyPrivacy, other} {
		for _, r := range exportCSV(t, wh, warehouse.ExportResponses, sid, time.Time{}) {
			if r["ip_address"] != "" || r["contact_id"] != "" || !privacy.IsHash(r["contact_id_hash"]) {
				t.Errorf("survey %d response %s: ip_address %q contact_id %q contact_id_hash %q", sid, r["response_id"], r["ip_address"], r["contact_id"], r["contact_id_hash"])
			}
		}
	}
	byQuestion := func(sid int64) map[string][]string {
		out := map[string][]string{}
		for _, r := range exportCSV(t, wh, warehouse.ExportAnswers, sid, time.Time{}) {
			out[r["question_id"]] = append(out[r["question_id"]], r["text"])
		}
		for _, v := range out {
			slices.Sort(v)
		}
		return out
	}
	ans := byQuestion(surveyPrivacy)
	if _, ok := ans[itoa(qUpload)]; ok {
		t.Errorf("the dropped upload question's answers are still there: %v", ans[itoa(qUpload)])
	}
	wantEssays := []string{d.Hash("Jan Novák, tel. 777 123 456"), d.Hash("essay v" + itoa(version(1)))}
	slices.Sort(wantEssays)
	if diff := cmp.Diff(wantEssays, ans[itoa(qEssay)]); diff != "" {
		t.Errorf("hashed essays (-want +got):\n%s", diff)
	}
	if got := byQuestion(other); len(got[itoa(qUpload)]) != 1 || !slices.Equal(got[itoa(qEssay)], []string{"jiný průzkum"}) {
		t.Errorf("the other survey's answers changed: %v", got)
	}
	if got, err := idx.FilesOf(c, surveyPrivacy, ref(surveyPrivacy).ResponseID); err != nil || len(got) != 0 {
		t.Errorf("the dropped question's files in the index: %v, %v", got, err)
	}
	if got, err := idx.FilesOf(c, other, ref(other).ResponseID); err != nil || len(got) != 1 {
		t.Errorf("the other survey's files in the index: %v, %v", got, err)
	}
	ledger := contacts(t, wh, "suite_privacy")
	if e := ledger[contactKey{1, "jana@example.cz"}]; e.ContactID != 0 || e.ContactIDHash != d.HashInt(7001) {
		t.Errorf("ledger row after ApplyPrivacy: contact_id %d, contact_id_hash %q; want the hash %q", e.ContactID, e.ContactIDHash, d.HashInt(7001))
	}

	// A second run (after a crash, or by hand) finds nothing to change.
	deleted = nil
	again, err := ps.ApplyPrivacy(c, d, deleteObjects)
	if err != nil {
		t.Fatal(err)
	}
	if got := nonZero(again); len(got) != 0 || len(deleted) != 0 {
		t.Errorf("a second ApplyPrivacy changed %v, deleted objects %v", got, deleted)
	}
	if diff := cmp.Diff(wantEssays, byQuestion(surveyPrivacy)[itoa(qEssay)]); diff != "" {
		t.Errorf("essays after a second run (-want +got):\n%s", diff)
	}
	recordRules(newRules)
}
