package privacy

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/surveysync/surveysync/pipeline/files"
	"github.com/surveysync/surveysync/survey"
)

var key = []byte("0123456789abcdef-test-key")

func wantHash(s string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(s))
	return hex.EncodeToString(m.Sum(nil))
}

const marker = "MARKER-personal-7f3a"

func sample() *survey.Response {
	fileID := survey.MustGUID("11111111-2222-3333-4444-555555555555")
	return &survey.Response{
		ResponseID:     survey.MustGUID("da453b67-791e-4d4d-9009-75b1ed8a33c1"),
		SurveyID:       123,
		ContactID:      ptr(int64(4998745)),
		DistributionID: ptr(int64(14457)),
		IPAddress:      "192.0.2.7",
		URLParameters: []survey.URLParameter{
			{Name: "email", Value: marker + "@example.com"},
			{Name: "customer", Value: "C-42"},
			{Name: "source", Value: "newsletter"},
		},
		Pages: []survey.Page{{ID: 1, Questions: []survey.Question{
			{ID: 45, Type: "single", Variable: "q45", Answers: []survey.Answer{{ChoiceID: survey.Int(1), ChoiceLabel: survey.Str("Yes"), Value: survey.Int(1)}}},
			{ID: 46, Type: "essay", Variable: "feedback", Answers: []survey.Answer{{Text: survey.Str("call me " + marker)}}},
			{ID: 47, Type: "essay", Variable: "other_text", Answers: []survey.Answer{{Text: survey.Str(marker)}}},
			{ID: 48, Type: "file_upload", Variable: "cv", Answers: []survey.Answer{{Text: survey.Str(string(fileID)), FileID: &fileID}}},
			{ID: 49, Type: "url_parameter", Variable: "email", Answers: []survey.Answer{{Text: survey.Str(marker + "@example.com")}}},
			{ID: 50, Type: "scale", Variable: "age", Answers: []survey.Answer{{Value: survey.Int(37)}}},
		}}},
	}
}

func ptr[T any](v T) *T { return &v }

func issuePolicy(t *testing.T) *Policy {
	t.Helper()
	p, err := New(Options{
		Key:           key,
		IPAddress:     Drop,
		ContactID:     Hash,
		URLParameters: map[string]Action{"email": Drop, "customer": Hash},
		Questions: []Rule{
			{Survey: 123, Question: 45, Action: Drop},
			{Variable: "feedback", Action: Hash},
			{Variable: "age", Action: Hash},
			{Type: "essay", Action: Drop},
			{Type: "file_upload", Action: Drop},
		},
	})
	if err != nil || p == nil {
		t.Fatalf("New: %v, %v", p, err)
	}
	return p
}

func TestApplyTheIssueExample(t *testing.T) {
	p := issuePolicy(t)
	r := sample()
	p.Apply(r)
	if r.IPAddress != "" {
		t.Errorf("ip_address kept: %q", r.IPAddress)
	}
	if r.ContactID != nil || r.ContactIDHash != wantHash("4998745") {
		t.Errorf("contact_id = %v, hash %q; want nil and %s", r.ContactID, r.ContactIDHash, wantHash("4998745"))
	}
	if r.DistributionID == nil || *r.DistributionID != 14457 {
		t.Errorf("distribution_id changed: %v", r.DistributionID)
	}
	wantParams := []survey.URLParameter{{Name: "customer", Value: wantHash("C-42")}, {Name: "source", Value: "newsletter"}}
	if got, _ := json.Marshal(r.URLParameters); string(got) != string(mustJSON(wantParams)) {
		t.Errorf("url_parameters = %s", got)
	}
	var ids []int64
	for _, q := range r.Pages[0].Questions {
		ids = append(ids, q.ID)
	}
	// 45 dropped by survey+question, 46 hashed (variable rule comes before
	// the essay rule), 47 dropped (essay), 48 dropped (upload), 49 dropped
	// (the url parameter email), 50 hashed (its value).
	if got := mustJSON(ids); string(got) != "[46,50]" {
		t.Fatalf("questions left: %s", got)
	}
	if a := r.Pages[0].Questions[0].Answers[0]; *a.Text != wantHash("call me "+marker) || a.Value != nil {
		t.Errorf("hashed essay: %+v", a)
	}
	if a := r.Pages[0].Questions[1].Answers[0]; a.Text == nil || *a.Text != wantHash("37") || a.Value != nil {
		t.Errorf("hashed scale: text %v value %v", a.Text, a.Value)
	}
	if strings.Contains(string(mustJSON(r)), marker) {
		t.Errorf("the marker survived: %s", mustJSON(r))
	}
	if fs := files.FindFiles(r, nil); len(fs) != 0 {
		t.Errorf("files of a dropped upload question are still found: %v", fs)
	}
}

func TestHashIsTheDocumentedHMAC(t *testing.T) {
	p, _ := New(Options{Key: key, IPAddress: Hash})
	// Lowercase hex of the full HMAC-SHA-256 of the text, keyed with the key's bytes.
	if got := p.Hash("192.0.2.7"); got != wantHash("192.0.2.7") || len(got) != 64 || strings.ToLower(got) != got {
		t.Errorf("Hash = %s", got)
	}
	if p.HashInt(-5) != wantHash("-5") {
		t.Error("HashInt is not the hash of the decimal")
	}
	other, _ := New(Options{Key: []byte("another key of enough length"), IPAddress: Hash})
	if other.Hash("x") == p.Hash("x") {
		t.Error("the key does not change the hash")
	}
}

func TestKeepEverythingIsNil(t *testing.T) {
	p, err := New(Options{IPAddress: Keep, URLParameters: map[string]Action{"*": Keep}, Questions: []Rule{{Type: "essay", Action: Keep}}})
	if err != nil || p != nil {
		t.Fatalf("New = %v, %v; want nil, nil", p, err)
	}
	r := sample()
	before := string(mustJSON(r))
	p.Apply(r)
	if string(mustJSON(r)) != before {
		t.Error("a nil policy changed the response")
	}
	if _, err := New(Options{ContactID: Hash}); err == nil {
		t.Error("hash without a key accepted")
	}
	if _, err := New(Options{Key: key, DistributionID: Hash}); err == nil {
		t.Error("distribution_id hash accepted")
	}
}

func TestStarAndHashedUploadAndURLParamQuestion(t *testing.T) {
	p, _ := New(Options{Key: key, URLParameters: map[string]Action{"*": Hash, "source": Keep},
		Questions: []Rule{{Variable: "cv", Action: Hash}}})
	r := sample()
	p.Apply(r)
	for _, u := range r.URLParameters {
		if (u.Name == "source") != (u.Value == "newsletter") {
			t.Errorf("param %s = %s", u.Name, u.Value)
		}
	}
	for _, q := range r.Pages[0].Questions {
		if q.ID == 48 {
			t.Error("a hash rule on an upload question must drop it (a file cannot be hashed)")
		}
		if q.ID == 49 && *q.Answers[0].Text != wantHash(marker+"@example.com") {
			t.Error("the url_parameter question does not follow its parameter's rule")
		}
	}
}

type fakeFetcher struct{}

func (fakeFetcher) GetResponse(context.Context, int64, survey.GUID) (*survey.Response, error) {
	return sample(), nil
}

func TestFetcherApplies(t *testing.T) {
	p := issuePolicy(t)
	r, err := p.Fetcher(fakeFetcher{}).GetResponse(context.Background(), 123, "x")
	if err != nil || r.IPAddress != "" || r.ContactIDHash == "" {
		t.Errorf("wrapped fetcher: %+v %v", r, err)
	}
	var nilp *Policy
	if _, ok := nilp.Fetcher(fakeFetcher{}).(fakeFetcher); !ok {
		t.Error("a nil policy wraps the fetcher")
	}
}

func TestWebhookBody(t *testing.T) {
	p := issuePolicy(t)
	body := []byte(`{"event_name":"response_received","survey_id":123,"response_id":"DA453B67-791E-4D4D-9009-75B1ED8A33C1","distribution_id":14457,"contact_id":4998745,"ip_address":"192.0.2.7","url_parameters":{"email":"` + marker + `","customer":"C-42"}}`)
	got := p.WebhookBody(body)
	var m map[string]any
	if err := json.Unmarshal(got, &m); err != nil {
		t.Fatal(err)
	}
	if _, ok := m["contact_id"]; ok || m["contact_id_hash"] != wantHash("4998745") {
		t.Errorf("contact id: %s", got)
	}
	if _, ok := m["ip_address"]; ok || strings.Contains(string(got), marker) {
		t.Errorf("personal data left: %s", got)
	}
	if params := m["url_parameters"].(map[string]any); params["customer"] != wantHash("C-42") {
		t.Errorf("url_parameters: %s", got)
	}
	// Nothing to change: the very same bytes.
	plain := []byte(`{"event_name":"survey_launched","survey_id":4574}`)
	if string(p.WebhookBody(plain)) != string(plain) {
		t.Error("an unchanged body was rewritten")
	}
	if string(p.WebhookBody([]byte("not json "+marker))) != string(WithheldBody) {
		t.Error("an unreadable body was kept")
	}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
