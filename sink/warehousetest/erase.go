package warehousetest

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/surveysync/surveysync/pipeline"
	"github.com/surveysync/surveysync/pipeline/files"
	"github.com/surveysync/surveysync/pipeline/privacy"
	"github.com/surveysync/surveysync/record"
	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/survey"
)

// eraseKey is response n of surveyErase.
func eraseKey(n int) warehouse.ResponseKey {
	return warehouse.ResponseKey{SurveyID: surveyErase, ResponseID: survey.GUID(guid(surveyErase, n))}
}

// erasures returns the audit rows of surveyID's responses.
func erasures(t *testing.T, e warehouse.Eraser, surveyID int64) []warehouse.Erasure {
	t.Helper()
	all, err := e.Erasures(ctx(t))
	out := only(t, "Erasures", all, err, func(x warehouse.Erasure) bool { return x.SurveyID == surveyID })
	slices.SortFunc(out, func(a, b warehouse.Erasure) int { return strings.Compare(string(a.ResponseID), string(b.ResponseID)) })
	return out
}

// testErase: EraseRows removes every row of the erased responses from
// every table and leaves the others; a second run finds nothing; the
// responses of a contact are found by id and by hash, and its ledger rows
// erased; the audit rows read back at their latest state. A backend that
// refuses mutations says so and changes nothing.
func testErase(t *testing.T, s *suite) {
	wh := s.wh
	er := wh.Eraser()
	if er == nil {
		return // testParts holds the backend to its choice
	}
	c := ctx(t)
	write(t, wh,
		resp{survey: surveyErase, n: 1, version: version(1), contact: 7001, upload: true},
		resp{survey: surveyErase, n: 2, version: version(1), hash: "ab12cd34"},
		resp{survey: surveyErase, n: 3, version: version(1), contact: 7003},
	)
	write(t, wh, resp{survey: surveyErase, n: 1, version: version(2), contact: 7001, upload: true, noScale: true}) // a second version
	write(t, wh, resp{survey: surveyErase2, n: 1, version: version(1), contact: 7001})                             // the contact in another survey
	if err := wh.WriteRejects(c, []pipeline.Reject{
		{SurveyID: surveyErase, ResponseID: survey.GUID(strings.ToUpper(guid(surveyErase, 1))), Stage: pipeline.StageWrite, Reason: "too_long",
			Source: "poll", RejectedAt: base, ListedStatus: survey.StatusCompleted},
		{SurveyID: surveyErase, ResponseID: survey.GUID(guid(surveyErase, 3)), Stage: pipeline.StageFetch, Reason: "decode", Source: "poll", RejectedAt: base},
	}); err != nil {
		t.Fatal(err)
	}
	if log := wh.WebhookLog(); log != nil {
		if err := log.LogEvents(c, []record.WebhookEvent{
			{EventID: "suite-e1", EventName: survey.EventResponseReceived, SurveyID: surveyErase, ResponseID: guid(surveyErase, 1),
				ReceivedAt: base, ProcessedAt: base, Outcome: "processed", Attempts: 1, Body: `{"contact_id":7001}`},
			{EventID: "suite-e3", EventName: survey.EventResponseReceived, SurveyID: surveyErase, ResponseID: guid(surveyErase, 3),
				ReceivedAt: base, ProcessedAt: base, Outcome: "processed", Attempts: 1, Body: `{}`},
		}); err != nil {
			t.Fatal(err)
		}
	}
	idx, err := wh.FileIndex()
	if err != nil {
		t.Fatal(err)
	}
	file := files.Record{FileRef: files.FileRef{SurveyID: surveyErase, ResponseID: survey.GUID(guid(surveyErase, 1)), QuestionID: qUpload,
		FileID: fileID(surveyErase, 1)}, ObjectURL: "s3://prilohy/x", SHA256: strings.Repeat("ab", 32), Size: 3, StoredAt: base, Version: 1}
	if err := idx.Record(c, []files.Record{file}); err != nil {
		t.Fatal(err)
	}
	l, err := wh.FeedLedger()
	if err != nil {
		t.Fatal(err)
	}
	if err := l.RecordContacts(c, []record.ContactEntry{
		{Feed: "suite_erase", Key: "a", DistributionID: 1, State: stPushed, ContactID: 7001, BatchID: "b", UpdatedAt: base, Version: 1},
		{Feed: "suite_erase", Key: "b", DistributionID: 1, State: stPushed, ContactIDHash: "ab12cd34", BatchID: "b", UpdatedAt: base, Version: 1},
		{Feed: "suite_erase", Key: "c", DistributionID: 1, State: stPushed, ContactID: 7003, BatchID: "b", UpdatedAt: base, Version: 1},
	}); err != nil {
		t.Fatal(err)
	}

	// The responses of a contact, by id (every survey) and by hash.
	of := func(id int64, hash string) []warehouse.ResponseKey {
		t.Helper()
		keys, err := er.ResponsesOfContact(c, id, hash)
		if err != nil {
			t.Fatal(err)
		}
		for i := range keys {
			keys[i].ResponseID = survey.GUID(strings.ToLower(string(keys[i].ResponseID)))
		}
		slices.SortFunc(keys, func(a, b warehouse.ResponseKey) int { return int(a.SurveyID - b.SurveyID) })
		return keys
	}
	if diff := cmp.Diff([]warehouse.ResponseKey{eraseKey(1), {SurveyID: surveyErase2, ResponseID: survey.GUID(guid(surveyErase2, 1))}}, of(7001, "")); diff != "" {
		t.Errorf("ResponsesOfContact(7001) (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]warehouse.ResponseKey{eraseKey(2)}, of(0, "ab12cd34")); diff != "" {
		t.Errorf("ResponsesOfContact(hash) (-want +got):\n%s", diff)
	}
	if got := of(424242, ""); len(got) != 0 {
		t.Errorf("ResponsesOfContact of an unknown contact: %v", got)
	}

	now := time.Now().UTC().Truncate(time.Second)
	started := []warehouse.Erasure{
		{ResponseKey: eraseKey(1), Reason: warehouse.ReasonContactRequest, State: warehouse.ErasureStarted, RequestedAt: now},
		{ResponseKey: eraseKey(2), Reason: warehouse.ReasonRequest, State: warehouse.ErasureStarted, RequestedAt: now},
	}
	if err := er.RecordErasures(c, started); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(started, erasures(t, er, surveyErase)); diff != "" {
		t.Errorf("Erasures (-want +got):\n%s", diff)
	}

	keys := []warehouse.ResponseKey{eraseKey(1), eraseKey(2)}
	if s.b.MutationsRefused != "" {
		if _, err := er.EraseRows(c, keys); err == nil || !strings.Contains(err.Error(), s.b.MutationsRefused) {
			t.Errorf("EraseRows = %v, want the refusal %q", err, s.b.MutationsRefused)
		}
		if got := current(t, wh, surveyErase); len(got) != 3 {
			t.Errorf("a refused erasure changed the current responses: %v", got)
		}
		return
	}
	found, err := er.EraseRows(c, keys)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"responses": 3, "answers": 4 + 3 + 3, "rejects": 1, "uploaded_files": 1}
	if wh.WebhookLog() != nil {
		want["webhook_events"] = 1
	}
	if diff := cmp.Diff(want, nonZero(found)); diff != "" {
		t.Errorf("EraseRows found (-want +got):\n%s", diff)
	}
	if got, want := current(t, wh, surveyErase), map[string]string{guid(surveyErase, 3): survey.StatusCompleted}; !maps.Equal(got, want) {
		t.Errorf("current responses after the erasure: %v, want %v", got, want)
	}
	if inv := wh.Inventory(); inv != nil {
		if ok, err := inv.HasResponse(c, surveyErase, eraseKey(1).ResponseID); err != nil || ok {
			t.Errorf("HasResponse of an erased response = %v, %v", ok, err)
		}
	}
	for _, table := range []string{warehouse.ExportResponses, warehouse.ExportAnswers, warehouse.ExportWide} {
		for _, row := range exportCSV(t, wh, table, surveyErase, time.Time{}) {
			if row["response_id"] != guid(surveyErase, 3) {
				t.Errorf("export %s: a row of %s", table, row["response_id"])
			}
		}
	}
	if n := len(exportCSV(t, wh, warehouse.ExportAnswers, surveyErase, time.Time{})); n != 3 {
		t.Errorf("export answers: %d rows, want the other response's 3", n)
	}
	if got, err := idx.FilesOf(c, surveyErase, eraseKey(1).ResponseID); err != nil || len(got) != 0 {
		t.Errorf("FilesOf an erased response = %v, %v", got, err)
	}
	if got := of(0, "ab12cd34"); len(got) != 0 {
		t.Errorf("ResponsesOfContact finds erased responses: %v", got)
	}
	// Idempotent: nothing left to find.
	again, err := er.EraseRows(c, keys)
	if err != nil {
		t.Fatal(err)
	}
	if got := nonZero(again); len(got) != 0 {
		t.Errorf("a second EraseRows found %v", got)
	}

	// The contact's ledger rows, by id and by hash.
	for _, tc := range []struct {
		id   int64
		hash string
	}{{7001, ""}, {0, "ab12cd34"}} {
		if n, err := er.EraseContact(c, tc.id, tc.hash); err != nil || n != 1 {
			t.Errorf("EraseContact(%d, %q) = %d, %v; want 1", tc.id, tc.hash, n, err)
		}
	}
	if got := contacts(t, wh, "suite_erase"); len(got) != 1 || got[contactKey{1, "c"}].ContactID != 7003 {
		t.Errorf("ledger after EraseContact: %v, want the other contact's row", got)
	}
	if n, err := er.EraseContact(c, 7001, ""); err != nil || n != 0 {
		t.Errorf("EraseContact again = %d, %v; want 0", n, err)
	}

	// The audit rows: the latest of each response wins.
	done := started[0]
	done.State, done.CompletedAt, done.Erased = warehouse.ErasureDone, now.Add(time.Second), "responses=2 answers=7 rejects=1 objects=1"
	if err := er.RecordErasures(c, []warehouse.Erasure{done}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]warehouse.Erasure{done, started[1]}, erasures(t, er, surveyErase)); diff != "" {
		t.Errorf("Erasures after one is done (-want +got):\n%s", diff)
	}
}

// nonZero is m without its zero counts.
func nonZero(m map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for k, v := range m {
		if v != 0 {
			out[k] = v
		}
	}
	return out
}

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
