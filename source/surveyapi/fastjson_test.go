package surveyapi

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/surveysync/surveysync/pipeline/survey"
)

var fastSeeds = []string{
	`{"result": {"response_id": "` + upperRID + `", "survey_id": 4574, "contact_id": null, "date_created": "2022-09-12T16:24:09.4885133Z", "date_completed": null, "total_time": "392", "response_status": "completed", "url_parameters": [], "pages": [{"id": 1, "questions": [{"id": 2, "type": "single", "answers": [{"choice_id": "3", "value": 5, "text": "P\u0159\u00edloha \ud83d\ude00", "file_id": "` + upperRID + `"}]}]}]}, "meta": {"request_id": "a2", "status_code": 200}}`,
	`{"meta": {"requestId": "x"}, "result": null}`,
	`{"result": {"response_id": "` + testRID + `", "Response_ID": "` + testRID + `"}}`,
	`{"result": {"response_id": "` + testRID + `", "pages": [{"id": 1}], "pages": [{"questions": []}]}}`,
	`{"result": {"response_id": "` + testRID + `", "total_time": 5.0, "extra": {"a": [1, -2.5e+3, true, false, null, "\"\\\/\b\f\n\r\t"]}}}`,
	`{"result": {"response_id": "` + testRID + `", "survey_name": "\ud800"}}`,
	`{"result": {"response_id": "` + testRID + `", "survey_id": 9223372036854775807, "contact_id": -9223372036854775808}}`,
	`{"result": {"per_page": 1000, "page": 2, "total": 1002, "data": [{"response_id": "` + upperRID + `", "href": "https://api/x"}]}, "meta": {"requestId": "l1"}}`,
	`{"result": {"per_page": 50, "page": 1, "total": 0, "data": []}}`,
	`{"result": {"data": null}}`,
	// Many small questions and answers in few bytes: the slabs must grow mid-question.
	`{"result": {"response_id": "` + testRID + `", "pages": [{"id": 1, "questions": [` + strings.Repeat(`{"id": 1, "answers": [{}, {"value": 1}, {}]}, `, 60) + `{"id": 2, "answers": [` + strings.Repeat(`{"text": "x"}, `, 200) + `{}]}]}]}}`,
	` {"result":{}} `,
	`{"result": {}} x`,
	`[]`,
	`null`,
}

// FuzzFastDecode checks that whenever the fast path accepts a body, it
// decodes exactly what encoding/json decodes (values, nil vs empty slices,
// request id).
func FuzzFastDecode(f *testing.F) {
	f.Add(responseJSON(upperRID))
	for _, s := range fastSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		checkFastResponse(t, body)
		checkFastList(t, body)
	})
}

func TestFastDecodeSeeds(t *testing.T) {
	accepted := 0
	for _, s := range append(fastSeeds, string(responseJSON(testRID))) {
		if _, _, ok := fastResponse([]byte(s)); ok {
			accepted++
		}
		checkFastResponse(t, []byte(s))
		checkFastList(t, []byte(s))
	}
	if accepted < 5 {
		t.Errorf("the fast path accepted only %d seeds", accepted)
	}
	if _, _, ok := fastResponse(responseJSON(testRID)); !ok {
		t.Error("the fast path rejects the realistic response")
	}
}

func checkFastResponse(t *testing.T, body []byte) {
	t.Helper()
	got, gotID, ok := fastResponse(body)
	if !ok {
		return
	}
	var env envelope[survey.Response]
	if err := json.Unmarshal(body, &env); err != nil {
		t.Fatalf("fast path accepted %q; encoding/json: %v", body, err)
	}
	if gotID != env.Meta.requestID() {
		t.Fatalf("request id %q, encoding/json %q", gotID, env.Meta.requestID())
	}
	if !reflect.DeepEqual(got, env.Result) {
		t.Fatalf("fast path differs from encoding/json for %q:\n%s", body, cmp.Diff(env.Result, got))
	}
}

func checkFastList(t *testing.T, body []byte) {
	t.Helper()
	got, gotID, ok := fastList(body)
	if !ok {
		return
	}
	var env envelope[survey.ResponseList]
	if err := json.Unmarshal(body, &env); err != nil {
		t.Fatalf("fast path accepted %q; encoding/json: %v", body, err)
	}
	if gotID != env.Meta.requestID() || !reflect.DeepEqual(got, env.Result) {
		t.Fatalf("fast list differs for %q:\n%s", body, cmp.Diff(env.Result, got))
	}
}

func TestPlain8(t *testing.T) {
	for c := 0; c < 256; c++ {
		want := strClass[c] == chPlain
		for pos := 0; pos < 8; pos++ {
			b := []byte("abcdefgh")
			b[pos] = byte(c)
			var x uint64
			for i := 7; i >= 0; i-- {
				x = x<<8 | uint64(b[i])
			}
			if got := plain8(x); got != want {
				t.Fatalf("plain8 with byte %#x at %d = %v, want %v", c, pos, got, want)
			}
		}
	}
	// Neighbours that defeat naive SWAR (borrows across bytes).
	for _, s := range []string{"\x1f\x20\x21\x22\x23\x5b\x5c\x5d", "\x00\x01\x21\x21\x21\x21\x21\x21", "!!!!!!!\x22", "\x7f\x7f\x7f\x7f\x7f\x7f\x7f\x7f"} {
		var x uint64
		for i := 7; i >= 0; i-- {
			x = x<<8 | uint64(s[i])
		}
		want := true
		for i := 0; i < 8; i++ {
			want = want && strClass[s[i]] == chPlain
		}
		if plain8(x) != want {
			t.Errorf("plain8(%q) = %v", s, !want)
		}
	}
}
