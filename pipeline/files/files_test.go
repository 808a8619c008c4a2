package files

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/surveysync/surveysync/survey"
)

const respJSON = `{
  "response_id": "DA453B67-791E-4D4D-9009-75B1ED8A33C1",
  "survey_id": 4574,
  "response_status": "completed",
  "date_created": "2022-08-21T10:30:00Z",
  "pages": [
    {"id": 1, "questions": [
      {"id": 10, "type": "single", "answers": [{"choice_id": 1, "text": "11111111-1111-1111-1111-111111111111"}]},
      {"id": 11, "type": "file_upload", "answers": [
        {"text": "AAAAAAAA-0000-0000-0000-000000000001, aaaaaaaa-0000-0000-0000-000000000002;aaaaaaaa-0000-0000-0000-000000000003"},
        {"text": "cv.pdf"},
        {"file_id": "aaaaaaaa-0000-0000-0000-000000000002"}
      ]}
    ]},
    {"id": 2, "questions": [
      {"id": 12, "type": "FileUpload", "answers": [{"file_id": "BBBBBBBB-0000-0000-0000-000000000001", "text": "{bbbbbbbb-0000-0000-0000-000000000002}\n bbbbbbbb-0000-0000-0000-000000000001"}]},
      {"id": 13, "type": "essay", "answers": [{"text": "cccccccc-0000-0000-0000-000000000001"}]},
      {"id": 14, "type": "upload", "answers": []}
    ]}
  ]
}`

func TestFindFiles(t *testing.T) {
	var r survey.Response
	if err := json.Unmarshal([]byte(respJSON), &r); err != nil {
		t.Fatal(err)
	}
	rid := survey.MustGUID("da453b67-791e-4d4d-9009-75b1ed8a33c1")
	ref := func(q int64, id string) FileRef {
		return FileRef{SurveyID: 4574, ResponseID: rid, QuestionID: q, FileID: survey.MustGUID(id)}
	}
	want := []FileRef{
		ref(11, "aaaaaaaa-0000-0000-0000-000000000001"),
		ref(11, "aaaaaaaa-0000-0000-0000-000000000002"),
		ref(11, "aaaaaaaa-0000-0000-0000-000000000003"),
		ref(12, "bbbbbbbb-0000-0000-0000-000000000001"),
		ref(12, "bbbbbbbb-0000-0000-0000-000000000002"),
	}
	if diff := cmp.Diff(want, FindFiles(&r, nil)); diff != "" {
		t.Errorf("FindFiles (-want +got):\n%s", diff)
	}
	// A custom match list replaces the default.
	got := FindFiles(&r, []string{"essay"})
	if len(got) != 1 || got[0] != ref(13, "cccccccc-0000-0000-0000-000000000001") {
		t.Errorf("FindFiles(essay) = %v", got)
	}
	if got := FindFiles(nil, nil); got != nil {
		t.Errorf("FindFiles(nil) = %v", got)
	}
	if k := want[0].Key(); k != "surveys/4574/responses/da453b67-791e-4d4d-9009-75b1ed8a33c1/aaaaaaaa-0000-0000-0000-000000000001" {
		t.Errorf("Key = %s", k)
	}
}

// TestRetainedFindsTheSameFiles: what a batch keeps of a response for the
// copier (Retained) yields the files of the whole response, under the
// default and a custom match list, and keeps no other question.
func TestRetainedFindsTheSameFiles(t *testing.T) {
	var r survey.Response
	if err := json.Unmarshal([]byte(respJSON), &r); err != nil {
		t.Fatal(err)
	}
	r.SurveyName = "Spokojenost"
	for _, match := range [][]string{nil, {"essay"}, {"nothing"}} {
		k := Retained(&r, match)
		if diff := cmp.Diff(FindFiles(&r, match), FindFiles(k, match)); diff != "" {
			t.Errorf("match %v: files of the retained response differ (-whole +retained):\n%s", match, diff)
		}
		if k.ResponseID != r.ResponseID || k.SurveyID != r.SurveyID || k.SurveyName != r.SurveyName || k.ResponseStatus != r.ResponseStatus {
			t.Errorf("match %v: retained %+v lost the ids, name or status", match, k)
		}
		for _, p := range k.Pages {
			for _, q := range p.Questions {
				if !IsUploadType(q.Type, match) {
					t.Errorf("match %v: retained question %d of type %s", match, q.ID, q.Type)
				}
			}
		}
	}
	if k := Retained(&r, []string{"nothing"}); k.Pages != nil {
		t.Errorf("no upload question, yet pages kept: %+v", k.Pages)
	}
}

func TestIsUploadType(t *testing.T) {
	for typ, want := range map[string]bool{"file": true, "File_Upload": true, "upload": true, "single": false, "essay": false, "": false} {
		if got := IsUploadType(typ, nil); got != want {
			t.Errorf("IsUploadType(%q) = %v, want %v", typ, got, want)
		}
	}
}
