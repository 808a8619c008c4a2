package survey

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestParseGUID(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{"DA453B67-791E-4D4D-9009-75B1ED8A33C1", "da453b67-791e-4d4d-9009-75b1ed8a33c1", ""},
		{"da453b67-791e-4d4d-9009-75b1ed8a33c1", "da453b67-791e-4d4d-9009-75b1ed8a33c1", ""},
		{"da453b67791e4d4d900975b1ed8a33c1", "", "36 characters"},
		{"da453b67-791e-4d4d-9009-75b1ed8a33cg", "", "not hexadecimal"},
		{"da453b67_791e-4d4d-9009-75b1ed8a33c1", "", "want '-'"},
	} {
		got, err := ParseGUID(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseGUID(%q) error %v, want one containing %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || string(got) != tc.want {
			t.Errorf("ParseGUID(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestTimeVariants(t *testing.T) {
	want := time.Date(2022, 9, 12, 16, 24, 9, 0, time.UTC)
	for _, in := range []string{
		"2022-09-12T16:24:09Z", "2022-09-12T16:24:09.4Z", "2022-09-12T16:24:09.488Z",
		"2022-09-12T16:24:09.4885133Z", "2022-09-12T18:24:09.4885133+02:00", "2022-09-12T16:24:09.4885133",
	} {
		var tm Time
		if err := json.Unmarshal([]byte(`"`+in+`"`), &tm); err != nil {
			t.Errorf("%s: %v", in, err)
			continue
		}
		if got := tm.Truncate(time.Second); !got.Equal(want) || tm.Location() != time.UTC {
			t.Errorf("%s decoded as %v", in, tm.Time)
		}
	}
	var tm Time
	if err := json.Unmarshal([]byte(`"12.9.2022"`), &tm); err == nil || !strings.Contains(err.Error(), "12.9.2022") {
		t.Errorf("a bad timestamp gave %v; want an error quoting it", err)
	}
}

func TestFlexInt(t *testing.T) {
	var a struct {
		V *FlexInt `json:"value"`
	}
	for in, want := range map[string]int64{`{"value":7}`: 7, `{"value":"7"}`: 7, `{"value":" 12 "}`: 12, `{"value":3.0}`: 3} {
		a.V = nil
		if err := json.Unmarshal([]byte(in), &a); err != nil || a.V == nil || int64(*a.V) != want {
			t.Errorf("%s: %v %v", in, a.V, err)
		}
	}
	a.V = nil
	if err := json.Unmarshal([]byte(`{"value":null}`), &a); err != nil || a.V != nil {
		t.Errorf("null: %v %v", a.V, err)
	}
	for _, in := range []string{`{"value":"x"}`, `{"value":2.5}`, `{"value":""}`} {
		if err := json.Unmarshal([]byte(in), &a); err == nil {
			t.Errorf("%s decoded without error", in)
		}
	}
}

func TestResponseDecodesServiceQuirks(t *testing.T) {
	body := `{"response_id":"DA453B67-791E-4D4D-9009-75B1ED8A33C1","survey_id":4574,"survey_name":"Test",
	"date_created":"2022-08-21T10:30:00.1234567Z","response_status":"completed",
	"pages":[{"id":1,"questions":[{"id":2,"type":"single","answers":[{"choice_id":"5","value":"3"}]}]}]}`
	var r Response
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatal(err)
	}
	q := r.Pages[0].Questions[0]
	if r.ResponseID != "da453b67-791e-4d4d-9009-75b1ed8a33c1" || q.Title != "" || int64(*q.Answers[0].ChoiceID) != 5 || int64(*q.Answers[0].Value) != 3 {
		t.Fatalf("decoded %+v", r)
	}
}

func TestBadGUIDIsNotQuoted(t *testing.T) {
	for _, s := range []string{"alice@example.com", "11111111-2222-3333-4444-55555555555x", "11111111x2222-3333-4444-555555555555"} {
		_, err := ParseGUID(s)
		if err == nil || strings.Contains(err.Error(), s) || strings.Contains(err.Error(), "alice") {
			t.Errorf("ParseGUID(%q) = %v: want an error that does not quote the value", s, err)
		}
	}
}
