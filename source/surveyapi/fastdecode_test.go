package surveyapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"github.com/surveysync/surveysync/sim"
	"github.com/surveysync/surveysync/survey"
)

// agreeFast decodes body both ways and fails t if the fast path accepted a
// body that encoding/json decodes differently or refuses. It reports
// whether the fast path accepted it.
func agreeFast(t testing.TB, body []byte) bool {
	t.Helper()
	return agreeFastNames(t, body, newInterner())
}

// agreeFastNames is agreeFast with an interner that earlier bodies filled.
func agreeFastNames(t testing.TB, body []byte, names *interner) bool {
	t.Helper()
	fast, fastID, ok := fastResponse(body, names)
	slow, slowID, err := decodeResult[survey.Response]("", body, "application/json", false)
	if !ok {
		return false
	}
	if err != nil {
		t.Fatalf("the fast path accepted a body encoding/json refuses (%v):\n%s", err, body)
	}
	if fastID != slowID {
		t.Fatalf("request id %q, encoding/json %q:\n%s", fastID, slowID, body)
	}
	if !reflect.DeepEqual(fast, slow) {
		t.Fatalf("the fast path decoded\n%+v\nencoding/json\n%+v\nfrom\n%s", fast, slow, body)
	}
	return true
}

const fastRID = "4c2c2b7e-63a4-4c5a-9b8e-1f0a2d3c4b5a"

func detailWith(result string) []byte {
	return []byte(`{"meta": {"requestId": "rq-1", "http_status": 200}, "result": ` + result + `}`)
}

// TestFastResponseAgrees: the usual forms take the fast path and decode as
// encoding/json does; the unusual ones are left to encoding/json.
func TestFastResponseAgrees(t *testing.T) {
	base := `"response_id": "` + fastRID + `", "survey_id": 4574, "response_status": "completed", "date_created": "2026-11-02T09:14:33.4885133Z"`
	taken := map[string][]byte{
		"realistic":         responseJSON(fastRID),
		"minimal":           detailWith(`{` + base + `}`),
		"escapes":           detailWith(`{` + base + `, "survey_name": "a\"b\\c\/d\b\f\n\r\t\u00e1\u2028\ud83d\ude00<\u0000>"}`),
		"nulls":             detailWith(`{` + base + `, "contact_id": null, "date_completed": null, "total_time": null, "survey_name": null, "url_parameters": null, "pages": null}`),
		"empty arrays":      detailWith(`{` + base + `, "url_parameters": [], "pages": [{"id": 1, "questions": []}]}`),
		"upper guid":        detailWith(`{` + strings.Replace(base, fastRID, strings.ToUpper(fastRID), 1) + `}`),
		"numbers as text":   detailWith(`{` + base + `, "total_time": " 392 ", "pages": [{"id": 1, "questions": [{"id": 2, "type": "scale", "answers": [{"value": "7", "row_id": "-3"}]}]}]}`),
		"unknown keys":      detailWith(`{` + base + `, "extra": {"a": [1, -2.5e+3, true, false, null, "x\u0041"]}, "x": 0}`),
		"answers":           detailWith(`{` + base + `, "pages": [{"id": 1, "questions": [{"id": 2, "type": "file_upload", "answers": [{"text": "f", "file_id": "` + strings.ToUpper(fastRID) + `", "row_label": null}]}]}]}`),
		"snake request id":  []byte(`{"meta": {"request_id": "rq-2", "status_code": "200"}, "result": {` + base + `}}`),
		"no meta":           []byte(` {"result": {` + base + `}} ` + "\n"),
		"meta null":         []byte(`{"meta": null, "result": {` + base + `}}`),
		"zone offset":       detailWith(`{` + strings.Replace(base, "33.4885133Z", "33+02:00", 1) + `}`),
		"no zone":           detailWith(`{` + strings.Replace(base, "33.4885133Z", "33.12", 1) + `}`),
		"whitespace":        []byte("\t{\r\n\"result\"\n:\n{" + base + "\n}\n}\n"),
		"content hash keys": detailWith(`{` + base + `, "ContactIDHash": "x", "-": 1}`),
	}
	for name, body := range taken {
		t.Run(name, func(t *testing.T) {
			if !agreeFast(t, body) {
				t.Fatalf("left to encoding/json:\n%s", body)
			}
		})
	}
	left := map[string][]byte{
		"key in another case":    detailWith(`{` + base + `, "Survey_Name": "x"}`),
		"kelvin sign key":        detailWith(`{` + base + `, "ris\u017f": 1, "pa\u212Aes": []}`),
		"key twice":              detailWith(`{` + base + `, "survey_id": 5}`),
		"escaped key":            detailWith(`{` + base + `, "survey\u005fname": "x"}`),
		"fraction":               detailWith(`{` + base + `, "total_time": 5.0}`),
		"exponent id":            detailWith(`{` + base + `, "contact_id": 1e3}`),
		"fraction as text":       detailWith(`{` + base + `, "total_time": "5.0"}`),
		"19 digits":              detailWith(`{` + base + `, "contact_id": 1234567890123456789}`),
		"id as text":             detailWith(`{` + base + `, "contact_id": "5"}`),
		"null guid":              detailWith(`{"response_id": null, "survey_id": 1}`),
		"null date":              detailWith(`{` + base + `, "date_created": null}`),
		"null page":              detailWith(`{` + base + `, "pages": [null]}`),
		"bad guid":               detailWith(`{"response_id": "nope", "survey_id": 1}`),
		"bad date":               detailWith(`{` + strings.Replace(base, "2026-11-02T09:14:33.4885133Z", "not a date", 1) + `}`),
		"invalid utf-8":          detailWith(`{` + base + `, "survey_name": "a` + "\xff" + `b"}`),
		"lone surrogate":         detailWith(`{` + base + `, "survey_name": "\ud83d x"}`),
		"low surrogate":          detailWith(`{` + base + `, "survey_name": "\ude00"}`),
		"result null":            []byte(`{"meta": {}, "result": null}`),
		"no result":              []byte(`{"meta": {}}`),
		"trailing data":          append(detailWith(`{`+base+`}`), 'x'),
		"trailing comma":         detailWith(`{` + base + `,}`),
		"not json":               []byte(`<html>`),
		"error fields":           []byte(`{"meta": {"errors": [{"error_message": "x"}]}, "result": {` + base + `}}`),
		"type mismatch":          detailWith(`{` + base + `, "survey_name": 5}`),
		"leading zero":           detailWith(`{` + base + `, "contact_id": 012}`),
		"bad escape":             detailWith(`{` + base + `, "survey_name": "\x"}`),
		"control character":      detailWith(`{` + base + `, "survey_name": "a` + "\n" + `"}`),
		"deep unknown":           detailWith(`{` + base + `, "x": ` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`),
		"truncated":              detailWith(`{` + base)[:60],
		"result is array":        detailWith(`[]`),
		"answer value is object": detailWith(`{` + base + `, "pages": [{"id": 1, "questions": [{"id": 2, "answers": [{"value": {}}]}]}]}`),
	}
	for name, body := range left {
		t.Run(name, func(t *testing.T) {
			if agreeFast(t, body) {
				t.Fatalf("the fast path took a body meant for encoding/json:\n%s", body)
			}
		})
	}
}

// TestFastResponseInternsOnlyPlainStrings: a label whose escaped form has
// the bytes of another label's value must not be read as that value.
func TestFastResponseInternsOnlyPlainStrings(t *testing.T) {
	names := newInterner()
	label := func(l string) []byte {
		return detailWith(`{"response_id": "` + fastRID + `", "survey_id": 1, "response_status": "completed", "date_created": "2026-11-02T09:14:33Z",` +
			` "pages": [{"id": 1, "questions": [{"id": 2, "type": "single", "title": "` + l + `", "answers": [{"choice_label": "` + l + `"}]}]}]}`)
	}
	for _, l := range []string{`x\\n`, `x\n`, `x\\n`, `x\n`, "plain", "plain", `q\"`, `q\"`} {
		if !agreeFastNames(t, label(l), names) {
			t.Fatalf("%s: left to encoding/json", l)
		}
	}
	r, _, _ := fastResponse(label("plain"), names)
	r2, _, _ := fastResponse(label("plain"), names)
	if unsafe.StringData(r.Pages[0].Questions[0].Title) != unsafe.StringData(r2.Pages[0].Questions[0].Title) {
		t.Error("a repeated title was not interned")
	}
}

// TestFastResponseAgreesWithTheEmulator decodes the emulator's details,
// plain and under every fault that changes a detail's body, both ways.
func TestFastResponseAgreesWithTheEmulator(t *testing.T) {
	s, err := sim.New(sim.Options{Token: "t", Seed: 5, Surveys: []sim.SurveySpec{
		{ID: 4574, Responses: 150, Seed: 7, Files: true},
	}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(func() { srv.Close(); s.Close() })
	get := func(path string) []byte {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1"+path, nil)
		req.Header.Set("X-API-TOKEN", "t")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	var ids []string
	for _, status := range []string{"completed", "partial", "disqualified", "quotafull"} {
		var l struct {
			Result survey.ResponseList `json:"result"`
		}
		if err := json.Unmarshal(get("/surveys/4574/responses?per_page=100&status="+status), &l); err != nil {
			t.Fatal(err)
		}
		for _, r := range l.Result.Data {
			ids = append(ids, string(r.ResponseID))
		}
	}
	if len(ids) < 100 {
		t.Fatalf("listed %d responses", len(ids))
	}
	names := newInterner() // shared by every detail, as the client's are
	for _, kind := range []string{"", sim.FaultVariantSpelling, sim.FaultUppercaseGUID, sim.FaultNoTitle,
		sim.FaultQuotaFullAsDisqualified, sim.FaultFutureDate, sim.FaultInvalidDate} {
		s.ClearFaults()
		if kind != "" {
			if err := s.InjectFault(sim.Fault{Op: sim.OpGetResponse, Kind: kind}); err != nil {
				t.Fatal(err)
			}
		}
		taken := 0
		for _, id := range ids {
			body := get("/surveys/4574/responses/" + id)
			if agreeFastNames(t, body, names) {
				taken++
			}
		}
		t.Logf("fault %q: %d of %d details took the fast path", kind, taken, len(ids))
		want := len(ids)
		if kind == sim.FaultInvalidDate {
			want = 0 // every detail has a date that does not parse: encoding/json's path words the error
		}
		if taken != want {
			t.Errorf("fault %q: %d of %d details took the fast path, want %d", kind, taken, len(ids), want)
		}
	}
}

// FuzzFastResponse: whatever the fast path accepts, encoding/json decodes
// to the same value.
//
//	go test -run '^$' -fuzz FuzzFastResponse -fuzztime 5m ./source/surveyapi
func FuzzFastResponse(f *testing.F) {
	f.Add(responseJSON(fastRID))
	f.Add(detailWith(`{"response_id": "` + fastRID + `", "survey_id": 1, "total_time": "5", "pages": [{"id": 1, "questions": [{"id": 2, "answers": [{"value": 3, "text": "a\u00e1\n"}]}]}]}`))
	f.Add([]byte(`{"meta": {"request_id": "x"}, "result": {"response_id": "` + strings.ToUpper(fastRID) + `", "date_completed": null, "x": [1, 2.5, "s"]}}`))
	names := newInterner()
	f.Fuzz(func(t *testing.T, body []byte) {
		agreeFastNames(t, body, names)
		agreeFastNames(t, body, nil)
	})
}

// BenchmarkFastResponse compares the decoders on the realistic detail.
//
//	go test -run '^$' -bench 'FastResponse' -benchmem ./source/surveyapi
func BenchmarkFastResponse(b *testing.B) {
	body := responseJSON(fastRID)
	var compact bytes.Buffer
	if err := json.Compact(&compact, body); err != nil {
		b.Fatal(err)
	}
	for _, name := range []string{"fast", "encoding_json"} {
		b.Run(name, func(b *testing.B) {
			in := compact.Bytes()
			b.SetBytes(int64(len(in)))
			b.ReportAllocs()
			names := newInterner()
			for b.Loop() {
				var r *survey.Response
				var err error
				if name == "fast" {
					var ok bool
					if r, _, ok = fastResponse(in, names); !ok {
						err = fmt.Errorf("left to encoding/json")
					}
				} else {
					r, _, err = decodeResult[survey.Response]("", in, "application/json", false)
				}
				if err != nil || r.ResponseID != fastRID {
					b.Fatal(err)
				}
			}
		})
	}
}
