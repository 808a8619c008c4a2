package surveyapi

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
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

	// The detached decode of a pooled buffer: nothing may point into the
	// buffer once it is reused.
	pooled := bytes.Clone(body)
	det, detID, ok := fastResponseDetached(pooled)
	if !ok {
		t.Fatalf("the detached decode rejects %q, which the fast path accepts", body)
	}
	for i := range pooled {
		pooled[i] = 'X'
	}
	if detID != env.Meta.requestID() || !reflect.DeepEqual(det, env.Result) {
		t.Fatalf("detached decode differs once the body is overwritten, for %q:\nrequest id %q, want %q\n%s",
			body, detID, env.Meta.requestID(), cmp.Diff(env.Result, det))
	}
}

// TestDetachVisitsEveryString fails when survey.Response gains a string
// (at any depth) that detacher.walk does not know: it would keep pointing
// into a reused buffer.
func TestDetachVisitsEveryString(t *testing.T) {
	known := map[string]bool{ // the fields detacher.walk visits
		"ResponseID": true, "SurveyName": true, "IPAddress": true, "ResponseStatus": true,
		"URLParameters[].Name": true, "URLParameters[].Value": true,
		"Pages[].Questions[].Type": true, "Pages[].Questions[].Title": true, "Pages[].Questions[].Variable": true,
		"Pages[].Questions[].Answers[].RowLabel": true, "Pages[].Questions[].Answers[].ColumnLabel": true,
		"Pages[].Questions[].Answers[].ChoiceLabel": true, "Pages[].Questions[].Answers[].Text": true,
		"Pages[].Questions[].Answers[].FileID": true,
	}
	var found []string
	var walk func(path string, ty reflect.Type)
	walk = func(path string, ty reflect.Type) {
		switch ty.Kind() {
		case reflect.String:
			found = append(found, path)
		case reflect.Pointer:
			walk(path, ty.Elem())
		case reflect.Slice, reflect.Array:
			walk(path+"[]", ty.Elem())
		case reflect.Map, reflect.Interface, reflect.Chan, reflect.Func, reflect.UnsafePointer:
			t.Errorf("%s: a %s in survey.Response; detacher.walk cannot vouch for it", path, ty.Kind())
		case reflect.Struct:
			if ty == reflect.TypeFor[survey.Time]() {
				return // a time.Time: no strings from the body
			}
			for i := range ty.NumField() {
				f := ty.Field(i)
				p := f.Name
				if path != "" {
					p = path + "." + f.Name
				}
				walk(p, f.Type)
			}
		}
	}
	walk("", reflect.TypeFor[survey.Response]())
	for _, p := range found {
		if !known[p] {
			t.Errorf("survey.Response.%s is a string detacher.walk does not visit: add it there and here", p)
		}
	}
	if len(found) != len(known) {
		t.Errorf("found %d strings, detacher.walk knows %d: %v", len(found), len(known), found)
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

// TestPlainRun checks the SWAR scan against a byte-by-byte one: every byte
// value at every position of the first and the second word, behind
// neighbours that defeat naive SWAR (borrows across bytes), and random
// strings over the borderline bytes.
func TestPlainRun(t *testing.T) {
	naive := func(b []byte, i int) int {
		for i < len(b) && strClass[b[i]] == chPlain {
			i++
		}
		return i
	}
	check := func(b []byte) {
		t.Helper()
		for i := 0; i <= len(b); i++ {
			if got, want := plainRun(b, i), naive(b, i); got != want {
				t.Fatalf("plainRun(%q, %d) = %d, want %d", b, i, got, want)
			}
		}
	}
	for c := 0; c < 256; c++ {
		for pos := 0; pos < 17; pos++ {
			for _, fill := range []byte{'a', 0x21, 0x23, 0x5b, 0x5d, 0x7f, 0x20} {
				b := bytes.Repeat([]byte{fill}, 17)
				b[pos] = byte(c)
				check(b)
				if pos > 0 {
					b[pos-1] = 0x00
					check(b)
				}
			}
		}
	}
	alphabet := []byte{0x00, 0x01, 0x1f, 0x20, 0x21, 0x22, 0x23, 0x5b, 0x5c, 0x5d, 0x7f, 0x80, 0xc3, 0xff, 'a'}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		b := make([]byte, rng.IntN(24))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		check(b)
	}
}
