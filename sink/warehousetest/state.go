package warehousetest

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/surveysync/surveysync/pipeline"
	"github.com/surveysync/surveysync/pipeline/files"
	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/survey"
)

// states returns the checkpoints of surveyID's streams.
func states(t *testing.T, wh warehouse.Warehouse, surveyID int64) []pipeline.StreamState {
	t.Helper()
	all, err := wh.LoadStates(ctx(t))
	if err != nil {
		t.Fatalf("LoadStates: %v", err)
	}
	var out []pipeline.StreamState
	for _, st := range all {
		if st.SurveyID == surveyID {
			out = append(out, st)
		}
	}
	return out
}

// testStates: checkpoints read back as saved (UTC, to the second), a
// later save of a stream replaces it and leaves the others, a cycle in
// flight is kept and cleared, and they are ordered by survey and stream.
func testStates(t *testing.T, s *suite) {
	wh := s.wh
	at := base.Add(30 * time.Minute)
	saved := []pipeline.StreamState{
		{SurveyID: surveyStates, Stream: pipeline.StreamPartial, Watermark: at, LastRunAt: at.Add(time.Minute), Synced: 3, UpdatedAt: at.Add(time.Minute)},
		{SurveyID: surveyStates, Stream: pipeline.StreamCompleted, Watermark: at, LastRunAt: at.Add(time.Minute), LastError: "HTTP 503 Služba nedostupná",
			Synced: 120, UpdatedAt: at.Add(time.Minute), CycleStartedAt: at.Add(-time.Minute), CycleListed: 500, CycleDone: 120},
	}
	if err := wh.SaveStates(ctx(t), saved); err != nil {
		t.Fatal(err)
	}
	want := []pipeline.StreamState{saved[1], saved[0]} // by stream
	if diff := cmp.Diff(want, states(t, wh, surveyStates)); diff != "" {
		t.Errorf("LoadStates (-want +got):\n%s", diff)
	}
	// The completed stream's cycle ends; the partial one is not saved.
	next := saved[1]
	next.Watermark, next.LastError, next.Synced = at.Add(time.Hour), "", 500
	next.CycleStartedAt, next.CycleListed, next.CycleDone = time.Time{}, 0, 0
	next.UpdatedAt = at.Add(time.Hour)
	if err := wh.SaveStates(ctx(t), []pipeline.StreamState{next}); err != nil {
		t.Fatal(err)
	}
	got := states(t, wh, surveyStates)
	if diff := cmp.Diff([]pipeline.StreamState{next, saved[0]}, got); diff != "" {
		t.Errorf("LoadStates after a second save (-want +got):\n%s", diff)
	}
	if len(got) > 0 && got[0].InCycle() {
		t.Error("a cleared cycle is still in flight")
	}
	if err := wh.SaveStates(ctx(t), nil); err != nil {
		t.Errorf("SaveStates of nothing: %v", err)
	}
	all, err := wh.LoadStates(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.IsSortedFunc(all, func(a, b pipeline.StreamState) int {
		if a.SurveyID != b.SurveyID {
			return int(a.SurveyID - b.SurveyID)
		}
		return strings.Compare(a.Stream, b.Stream)
	}) {
		t.Errorf("LoadStates is not ordered by survey and stream: %v", all)
	}
}

// testSurveys: surveys read back as saved; a later save of one replaces
// it and leaves the others.
func testSurveys(t *testing.T, s *suite) {
	wh := s.wh
	launched := base.Add(-24 * time.Hour)
	ended := base
	saved := []pipeline.SurveyInfo{
		{SurveyID: surveyStates, Name: "Spokojenost zákazníků", LaunchedAt: &launched, FirstSeen: base, LastSeen: base},
		{SurveyID: surveyStates + 1, Name: "Druhý", FirstSeen: base, LastSeen: base},
	}
	if err := wh.SaveSurveys(ctx(t), saved); err != nil {
		t.Fatal(err)
	}
	load := func() []pipeline.SurveyInfo {
		t.Helper()
		all, err := wh.LoadSurveys(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		var out []pipeline.SurveyInfo
		for _, si := range all {
			if si.SurveyID == surveyStates || si.SurveyID == surveyStates+1 {
				out = append(out, si)
			}
		}
		return out
	}
	if diff := cmp.Diff(saved, load()); diff != "" {
		t.Errorf("LoadSurveys (-want +got):\n%s", diff)
	}
	next := saved[0]
	next.Name, next.EndedAt, next.LastSeen = "Spokojenost zákazníků 2026", &ended, base.Add(time.Hour)
	if err := wh.SaveSurveys(ctx(t), []pipeline.SurveyInfo{next}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]pipeline.SurveyInfo{next, saved[1]}, load()); diff != "" {
		t.Errorf("LoadSurveys after a second save (-want +got):\n%s", diff)
	}
}

// testRejects: reject records are written (twice harmlessly), and
// RejectedResponses returns the responses rejected when a list showed
// them and not written since, with the latest such list's status.
func testRejects(t *testing.T, s *suite) {
	wh := s.wh
	at := base.Add(30*time.Minute + time.Second)
	rej := func(n int, status string, at time.Time) pipeline.Reject {
		return pipeline.Reject{SurveyID: surveyRejects, ResponseID: survey.GUID(guid(surveyRejects, n)), Stage: pipeline.StageFetch,
			Reason: "date_out_of_range", Error: "date_created: rok 0000", Source: "poll", RejectedAt: at, ListedStatus: status}
	}
	rejects := []pipeline.Reject{
		rej(1, survey.StatusCompleted, at),                     // rejected, never written
		rej(2, survey.StatusPartial, at),                       // rejected twice: the latest status wins
		rej(2, survey.StatusDisqualified, at.Add(time.Minute)), //
		rej(3, survey.StatusCompleted, at),                     // written after the reject: the write wins
		rej(4, survey.StatusCompleted, at.Add(time.Hour)),      // written, then rejected: the reject wins
		rej(5, "", at),                   // a webhook's: no list status
		rej(6, survey.StatusPartial, at), // deleted after the reject: the deletion wins
		{SurveyID: surveyRejects2, ResponseID: survey.GUID(guid(surveyRejects2, 7)), Stage: pipeline.StageFlatten, Reason: "decode", Source: "poll",
			RejectedAt: at, ListedStatus: survey.StatusCompleted},
	}
	for range 2 {
		if err := wh.WriteRejects(ctx(t), rejects); err != nil {
			t.Fatal(err)
		}
	}
	// The same response named in upper case by a later list.
	if err := wh.WriteRejects(ctx(t), []pipeline.Reject{{SurveyID: surveyRejects, ResponseID: survey.GUID(strings.ToUpper(guid(surveyRejects, 1))),
		Stage: pipeline.StageFetch, Reason: "decode", Source: "poll", RejectedAt: at.Add(2 * time.Minute), ListedStatus: survey.StatusQuotaFull}}); err != nil {
		t.Fatal(err)
	}
	if err := wh.WriteRejects(ctx(t), nil); err != nil {
		t.Errorf("WriteRejects of nothing: %v", err)
	}
	write(t, wh,
		resp{survey: surveyRejects, n: 3, version: uint64(at.Add(2 * time.Second).UnixNano())},
		resp{survey: surveyRejects, n: 4, version: uint64(at.UnixNano())},
	)
	write(t, wh, resp{survey: surveyRejects, n: 6, version: uint64(at.Add(2 * time.Second).UnixNano()), deleted: true})
	ri, ok := wh.Inventory().(warehouse.RejectInventory)
	if !ok {
		return // testParts holds the backend to its choice
	}
	got, err := ri.RejectedResponses(ctx(t), surveyRejects)
	if err != nil {
		t.Fatal(err)
	}
	lower := map[string]string{}
	for id, st := range got {
		lower[strings.ToLower(string(id))] = st
	}
	want := map[string]string{
		guid(surveyRejects, 1): survey.StatusQuotaFull,
		guid(surveyRejects, 2): survey.StatusDisqualified,
		guid(surveyRejects, 4): survey.StatusCompleted,
	}
	if diff := cmp.Diff(want, lower); diff != "" {
		t.Errorf("RejectedResponses (-want +got):\n%s", diff)
	}
	if got, err := ri.RejectedResponses(ctx(t), surveyRejects2); err != nil || !maps.Equal(got, map[survey.GUID]string{survey.GUID(guid(surveyRejects2, 7)): survey.StatusCompleted}) {
		t.Errorf("RejectedResponses of the other survey = %v, %v", got, err)
	}
	if got, err := ri.RejectedResponses(ctx(t), surveyRejects+100); err != nil || len(got) != 0 {
		t.Errorf("RejectedResponses of a survey without rejects = %v, %v", got, err)
	}
}

// testFileIndex: the newest version of a file wins (an older one recorded
// late is ignored), Pending lists the live files not stored yet oldest
// attempt first, and FilesOf a response's files at their latest version.
func testFileIndex(t *testing.T, s *suite) {
	c := ctx(t)
	idx, err := s.wh.FileIndex()
	if err != nil {
		t.Fatal(err)
	}
	ref := func(n, f int) files.FileRef {
		return files.FileRef{SurveyID: surveyFiles, ResponseID: survey.GUID(guid(surveyFiles, n)), QuestionID: qUpload, FileID: fileID(surveyFiles, f)}
	}
	at := base.Add(-time.Hour) // older than the other tests' attempts
	failed := func(r files.FileRef, attempts int, at time.Time, v uint64) files.Record {
		return files.Record{FileRef: r, ObjectURL: "file:///srv/prilohy/" + r.Key(), FileName: "smlouva č. 1.pdf",
			Error: "HTTP 503", Attempts: attempts, StoredAt: at, Version: v}
	}
	stored := func(r files.FileRef, at time.Time, v uint64) files.Record {
		return files.Record{FileRef: r, ObjectURL: "s3://prilohy/" + r.Key(), FileName: "smlouva č. 1.pdf", ContentType: "application/pdf",
			Size: 12345, SHA256: strings.Repeat("ab", 32), StoredAt: at, Version: v}
	}
	if err := idx.Record(c, []files.Record{
		failed(ref(1, 1), 1, at.Add(2*time.Second), 10),
		failed(ref(1, 2), 3, at.Add(time.Second), 10),
		stored(ref(2, 3), at, 10),
		failed(ref(3, 4), 1, at.Add(3*time.Second), 10),
	}); err != nil {
		t.Fatal(err)
	}
	pending := func(limit int) []files.FileRef {
		t.Helper()
		recs, err := idx.Pending(c, limit)
		if err != nil {
			t.Fatal(err)
		}
		var out []files.FileRef
		for _, r := range recs {
			if r.SurveyID == surveyFiles {
				out = append(out, r.FileRef)
			}
		}
		return out
	}
	if diff := cmp.Diff([]files.FileRef{ref(1, 2), ref(1, 1), ref(3, 4)}, pending(100)); diff != "" {
		t.Errorf("Pending (-want +got):\n%s", diff)
	}
	if got := pending(1); len(got) != 1 || got[0] != ref(1, 2) {
		t.Errorf("Pending(1) = %v, want the oldest attempt %v", got, ref(1, 2))
	}
	// File 1 is stored at last; file 2's stored version comes late, older
	// than its failure: ignored; file 4's response is deleted.
	if err := idx.Record(c, []files.Record{stored(ref(1, 1), at.Add(time.Minute), 20), stored(ref(1, 2), at.Add(time.Minute), 5)}); err != nil {
		t.Fatal(err)
	}
	del := failed(ref(3, 4), 1, at.Add(time.Minute), 20)
	del.Deleted = true
	if err := idx.Record(c, []files.Record{del}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]files.FileRef{ref(1, 2)}, pending(100)); diff != "" {
		t.Errorf("Pending after the stored and deleted versions (-want +got):\n%s", diff)
	}
	got, err := idx.FilesOf(c, surveyFiles, survey.GUID(guid(surveyFiles, 1)))
	if err != nil {
		t.Fatal(err)
	}
	want := []files.Record{stored(ref(1, 1), at.Add(time.Minute), 20), failed(ref(1, 2), 3, at.Add(time.Second), 10)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("FilesOf (-want +got):\n%s", diff)
	}
	if got, err := idx.FilesOf(c, surveyFiles, survey.GUID(guid(surveyFiles, 404))); err != nil || len(got) != 0 {
		t.Errorf("FilesOf a response without files = %v, %v", got, err)
	}
	// A deleted file: its latest version says so.
	got, err = idx.FilesOf(c, surveyFiles, survey.GUID(guid(surveyFiles, 3)))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]files.Record{del}, got); diff != "" {
		t.Errorf("FilesOf a deleted response (-want +got):\n%s", diff)
	}
	if err := idx.Record(c, nil); err != nil {
		t.Errorf("Record of nothing: %v", err)
	}
}
