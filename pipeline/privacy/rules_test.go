package privacy

import (
	"encoding/json"
	"strings"
	"testing"
)

func rulesOf(o Options) Rules {
	if o.Key == nil {
		o.Key = key
	}
	return o.Rules()
}

func TestRulesRecordHoldsNoKey(t *testing.T) {
	r := rulesOf(Options{ContactID: Hash, IPAddress: Drop})
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), string(key)) || r.KeyFingerprint == "" || len(r.KeyFingerprint) != 16 {
		t.Fatalf("record %s", b)
	}
	if r.KeyFingerprint == KeyFingerprint([]byte("another key 0123456789")) {
		t.Fatal("two keys share a fingerprint")
	}
	if rulesOf(Options{IPAddress: Drop}).KeyFingerprint != "" {
		t.Error("a fingerprint is recorded although nothing hashes")
	}
	var back Rules
	if err := json.Unmarshal(b, &back); err != nil || len(Compare(r, back)) != 0 {
		t.Errorf("a record read back differs: %v %v", err, Compare(r, back))
	}
}

func TestCompareFields(t *testing.T) {
	base := rulesOf(Options{IPAddress: Hash, URLParameters: map[string]Action{"email": Drop, "*": Keep}})
	cases := []struct {
		name     string
		new      Options
		otherKey bool
		stricter []string // rules named by the stricter changes
		looser   []string
	}{
		{"same", Options{IPAddress: Hash, URLParameters: map[string]Action{"email": Drop}}, false, nil, nil},
		{"keep→drop", Options{IPAddress: Hash, ContactID: Drop, URLParameters: map[string]Action{"email": Drop}}, false,
			[]string{"privacy.fields.contact_id: keep → drop"}, nil},
		{"keep→hash", Options{IPAddress: Hash, ContactID: Hash, URLParameters: map[string]Action{"email": Drop}}, false,
			[]string{"privacy.fields.contact_id: keep → hash"}, nil},
		{"hash→drop", Options{IPAddress: Drop, URLParameters: map[string]Action{"email": Drop}}, false,
			[]string{"privacy.fields.ip_address: hash → drop"}, nil},
		{"hash→keep is looser", Options{URLParameters: map[string]Action{"email": Drop}}, false,
			nil, []string{"privacy.fields.ip_address: hash → keep"}},
		{"drop→keep is looser", Options{IPAddress: Hash}, false,
			nil, []string{"privacy.fields.url_parameters.email: drop → keep"}},
		{"drop→hash has nothing to rewrite", Options{IPAddress: Hash, URLParameters: map[string]Action{"email": Hash}}, false,
			nil, []string{"privacy.fields.url_parameters.email: drop → hash"}},
		{"a new parameter rule", Options{IPAddress: Hash, URLParameters: map[string]Action{"email": Drop, "customer": Hash}}, false,
			[]string{"privacy.fields.url_parameters.customer: keep → hash"}, nil},
		{"every parameter", Options{IPAddress: Hash, URLParameters: map[string]Action{"email": Drop, "*": Drop}}, false,
			[]string{"privacy.fields.url_parameters.*: keep → drop"}, nil},
		{"changed key", Options{IPAddress: Hash, URLParameters: map[string]Action{"email": Drop}}, true,
			[]string{"privacy.hash_key", "privacy.fields.ip_address: hash (hashed with the former key)"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.otherKey {
				c.new.Key = []byte("another key 0123456789")
			}
			d := Compare(base, rulesOf(c.new))
			check := func(what string, got Diff, want []string) {
				if len(got) != len(want) {
					t.Fatalf("%s changes: %v, want %v", what, got, want)
				}
				for i, w := range want {
					if !strings.HasPrefix(got[i].String(), w) {
						t.Errorf("%s change %d = %q, want %q", what, i, got[i], w)
					}
				}
			}
			check("stricter", d.Stricter(), c.stricter)
			check("looser", d.Looser(), c.looser)
		})
	}
}

func TestCompareQuestions(t *testing.T) {
	essayDrop := Rule{Type: "essay", Action: Drop}
	fbHash := Rule{Variable: "feedback", Action: Hash}
	q45Keep := Rule{Survey: 123, Question: 45, Action: Keep}
	cases := []struct {
		name     string
		old, new []Rule
		stricter bool
		changes  int
	}{
		{"same", []Rule{fbHash, essayDrop}, []Rule{fbHash, essayDrop}, false, 0},
		{"added drop", []Rule{fbHash}, []Rule{fbHash, essayDrop}, true, 1},
		{"added keep", []Rule{essayDrop}, []Rule{q45Keep, essayDrop}, false, 1},
		{"drop→keep", []Rule{essayDrop}, []Rule{{Type: "essay", Action: Keep}}, false, 1},
		{"hash→drop", []Rule{fbHash}, []Rule{{Variable: "feedback", Action: Drop}}, true, 1},
		{"removed drop", []Rule{fbHash, essayDrop}, []Rule{fbHash}, false, 1},
		{"removed hash ahead of a drop", []Rule{fbHash, essayDrop}, []Rule{essayDrop}, true, 1},
		{"removed keep ahead of a drop", []Rule{q45Keep, essayDrop}, []Rule{essayDrop}, true, 1},
		{"moved", []Rule{fbHash, essayDrop}, []Rule{essayDrop, fbHash}, true, 1},
		{"type case", []Rule{essayDrop}, []Rule{{Type: "ESSAY", Action: Drop}}, false, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := Compare(rulesOf(Options{Questions: c.old}), rulesOf(Options{Questions: c.new}))
			if len(d) != c.changes || (len(d.Stricter()) > 0) != c.stricter {
				t.Errorf("diff %v: %d changes (want %d), stricter %v (want %v)", d, len(d), c.changes, len(d.Stricter()) > 0, c.stricter)
			}
			for _, ch := range d {
				if !strings.HasPrefix(ch.Rule, "privacy.questions[") {
					t.Errorf("change %q does not name the rule", ch)
				}
			}
		})
	}
}

func TestDelta(t *testing.T) {
	old := rulesOf(Options{IPAddress: Keep, ContactID: Keep, URLParameters: map[string]Action{"email": Drop},
		Questions: []Rule{{Variable: "feedback", Action: Hash}}})
	new := rulesOf(Options{IPAddress: Drop, ContactID: Hash, URLParameters: map[string]Action{"email": Drop, "customer": Hash},
		Questions: []Rule{{Variable: "feedback", Action: Hash}, {Type: "essay", Action: Drop}, {Type: "file_upload", Action: Drop}}})
	d := NewDelta(old, new, key)
	if d.Empty() {
		t.Fatal("empty delta")
	}
	for name, want := range map[string]Action{"ip_address": Drop, "contact_id": Hash, "distribution_id": Keep} {
		if got := d.Field(name); got != want {
			t.Errorf("Field(%s) = %s, want %s", name, got, want)
		}
	}
	for name, want := range map[string]Action{"email": Keep, "customer": Hash, "source": Keep} {
		if got := d.Param(name); got != want {
			t.Errorf("Param(%s) = %s, want %s", name, got, want)
		}
	}
	for _, q := range []struct {
		typ, variable string
		want          Action
	}{{"essay", "feedback", Keep}, {"essay", "other", Drop}, {"file_upload", "cv", Drop}, {"single", "q45", Keep}} {
		if got := d.Question(123, 1, q.typ, q.variable); got != q.want {
			t.Errorf("Question(%s, %s) = %s, want %s", q.typ, q.variable, got, q.want)
		}
	}
	if h := d.Hash("C-42"); h != wantHash("C-42") || d.Hash(h) != h {
		t.Errorf("Hash is not idempotent: %s, %s", h, d.Hash(h))
	}
	body := []byte(`{"ip_address":"192.0.2.7","contact_id":4998745,"url_parameters":[{"name":"customer","value":"C-42"}]}`)
	once := d.WebhookBody(body)
	if twice := d.WebhookBody(once); string(twice) != string(once) {
		t.Errorf("WebhookBody is not idempotent:\n%s\n%s", once, twice)
	}
	for _, gone := range []string{"192.0.2.7", "4998745", "C-42"} {
		if strings.Contains(string(once), gone) {
			t.Errorf("body %s keeps %s", once, gone)
		}
	}
	if !strings.Contains(string(once), wantHash("4998745")) || !strings.Contains(string(once), wantHash("C-42")) {
		t.Errorf("body %s lacks the hashes", once)
	}

	// A changed key empties what was hashed with the former one.
	k2 := rulesOf(Options{Key: []byte("another key 0123456789"), ContactID: Hash, Questions: []Rule{{Variable: "feedback", Action: Hash}}})
	d2 := NewDelta(rulesOf(Options{ContactID: Hash, Questions: []Rule{{Variable: "feedback", Action: Hash}}}), k2, []byte("another key 0123456789"))
	if d2.Field("contact_id") != Clear || d2.Question(1, 1, "essay", "feedback") != Clear {
		t.Errorf("changed key: contact_id %s, feedback %s, want clear", d2.Field("contact_id"), d2.Question(1, 1, "essay", "feedback"))
	}
	if got := d2.WebhookBody([]byte(`{"contact_id_hash":"` + wantHash("1") + `"}`)); strings.Contains(string(got), "contact_id_hash") {
		t.Errorf("changed key: body keeps the former hash: %s", got)
	}
	// Nothing changed: nothing to do.
	if d := NewDelta(new, new, key); !d.Empty() {
		t.Error("a delta between equal rules is not empty")
	}
}
