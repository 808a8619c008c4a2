// Package privacy applies the privacy: configuration (docs/privacy.md) to
// what the service sends, once, before anything is written: a response's
// personal fields and chosen questions are dropped (never written
// anywhere), hashed (keyed HMAC-SHA-256, lowercase hex: stable, so joins
// across tables still work) or kept.
//
// The daemon wraps the pipeline's Fetcher with Policy.Fetcher, the one
// place a fetched response enters the pipeline: flatten (ClickHouse or
// Parquet rows), the rejects, the content cache, the file copier
// (OnResponse) and every log line downstream see the transformed response
// only. The webhook receiver stores bodies through Policy.WebhookBody, and
// the feed ledger hashes the contact ids it stores with HashInt.
//
// The package imports only survey and pipeline/files.
package privacy

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/surveysync/surveysync/pipeline/files"
	"github.com/surveysync/surveysync/survey"
)

// Action is what happens to a field or a question's answers.
type Action string

// Actions.
const (
	Keep Action = "keep" // the default; "" means keep too
	Drop Action = "drop"
	Hash Action = "hash"
)

// Rule selects questions; every selector set must match.
type Rule struct {
	Survey   int64  `json:"survey,omitempty"`   // 0: any
	Question int64  `json:"question,omitempty"` // 0: any (needs Survey)
	Variable string `json:"variable,omitempty"` // "": any
	Type     string `json:"type,omitempty"`     // "": any; compared case-insensitively
	Action   Action `json:"action"`
}

// Options are the rules, as config.Privacy holds them.
type Options struct {
	Key            []byte // the HMAC key; needed when any action is Hash
	IPAddress      Action
	ContactID      Action
	DistributionID Action
	URLParameters  map[string]Action // name → action; "*" every other name
	Questions      []Rule            // first match wins
	// TypeMatch marks upload questions (files.type_match): a hash rule
	// matching one drops it, since a file cannot be hashed.
	TypeMatch []string
}

// Policy applies Options. A nil *Policy keeps everything.
type Policy struct {
	o        Options
	paramAny Action
	enabled  bool
	// guard leaves values that already are hashes (IsHash) as they are:
	// privacy apply (Delta) runs again over data it may have hashed.
	guard bool
}

// New checks o and returns its Policy; nil when o keeps everything.
func New(o Options) (*Policy, error) {
	p := &Policy{o: o, paramAny: Keep}
	check := func(a Action) error {
		switch a {
		case "", Keep:
			return nil
		case Drop:
			p.enabled = true
			return nil
		case Hash:
			p.enabled = true
			if len(o.Key) == 0 {
				return errors.New("privacy: a hash is asked for but there is no key")
			}
			return nil
		}
		return fmt.Errorf("privacy: unknown action %q", a)
	}
	var errs []error
	errs = append(errs, check(o.IPAddress), check(o.ContactID), check(o.DistributionID))
	if o.DistributionID == Hash {
		errs = append(errs, errors.New("privacy: distribution_id cannot be hashed"))
	}
	for name, a := range o.URLParameters {
		errs = append(errs, check(a))
		if name == "*" {
			p.paramAny = a
		}
	}
	for _, r := range o.Questions {
		errs = append(errs, check(r.Action))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if !p.enabled {
		return nil, nil
	}
	return p, nil
}

// Enabled reports whether p drops or hashes anything.
func (p *Policy) Enabled() bool { return p != nil && p.enabled }

// Hash returns the lowercase hex of the HMAC-SHA-256 of s under the key.
func (p *Policy) Hash(s string) string {
	m := hmac.New(sha256.New, p.o.Key)
	m.Write([]byte(s))
	return hex.EncodeToString(m.Sum(nil))
}

// hv is the stored form of a value to hash: its Hash, or the value itself
// when p guards and it already is one.
func (p *Policy) hv(s string) string {
	if p.guard && IsHash(s) {
		return s
	}
	return p.Hash(s)
}

// IsHash reports whether s has the form of a hash: 64 lowercase hex
// digits.
func IsHash(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Idempotent returns p leaving values that already have a hash's form
// (IsHash) as they are, so that applying it twice changes nothing: for a
// webhook body rewritten before the spool stores it and again before the
// webhook log does (nil for nil).
func (p *Policy) Idempotent() *Policy {
	if p == nil {
		return nil
	}
	q := *p
	q.guard = true
	return &q
}

// HashInt is Hash of n in decimal (how the service sends numbers).
func (p *Policy) HashInt(n int64) string { return p.Hash(strconv.FormatInt(n, 10)) }

// HashesContactID reports whether contact ids are stored as their hash
// (the feed ledger then hashes the ids it stores).
func (p *Policy) HashesContactID() bool { return p != nil && p.o.ContactID == Hash }

// DropsContactID reports whether contact ids are kept out entirely.
func (p *Policy) DropsContactID() bool { return p != nil && p.o.ContactID == Drop }

func (p *Policy) param(name string) Action {
	if a, ok := p.o.URLParameters[name]; ok && a != "" {
		return a
	}
	return p.paramAny
}

// isURLParamType reports whether a question type carries a URL parameter's
// value (the service's url_parameter questions).
func isURLParamType(t string) bool {
	t = strings.ToLower(t)
	return strings.Contains(t, "url_param") || strings.Contains(t, "urlparam")
}

// QuestionAction is the action for question q of survey surveyID: the
// first matching rule's, else for a url_parameter question the action of
// the parameter its variable names, else Keep. A hash on an upload
// question is Drop.
func (p *Policy) QuestionAction(surveyID int64, q *survey.Question) Action {
	if p == nil {
		return Keep
	}
	a := Keep
	matched := false
	for _, r := range p.o.Questions {
		if r.Survey != 0 && r.Survey != surveyID ||
			r.Question != 0 && r.Question != q.ID ||
			r.Variable != "" && r.Variable != q.Variable ||
			r.Type != "" && !strings.EqualFold(r.Type, q.Type) {
			continue
		}
		a, matched = r.Action, true
		break
	}
	if !matched && isURLParamType(q.Type) && q.Variable != "" {
		a = p.param(q.Variable)
	}
	if a == Hash && files.IsUploadType(q.Type, p.o.TypeMatch) {
		a = Drop
	}
	if a == "" {
		a = Keep
	}
	return a
}

// Apply transforms r in place. It is safe on a nil Policy (keeps all) and
// a nil r.
func (p *Policy) Apply(r *survey.Response) {
	if !p.Enabled() || r == nil {
		return
	}
	switch p.o.IPAddress {
	case Drop:
		r.IPAddress = ""
	case Hash:
		if r.IPAddress != "" {
			r.IPAddress = p.hv(r.IPAddress)
		}
	}
	switch p.o.ContactID {
	case Drop:
		r.ContactID, r.ContactIDHash = nil, ""
	case Hash:
		if r.ContactID != nil {
			r.ContactIDHash = p.HashInt(*r.ContactID)
			r.ContactID = nil
		}
	}
	if p.o.DistributionID == Drop {
		r.DistributionID = nil
	}
	if len(r.URLParameters) > 0 {
		out := r.URLParameters[:0:0]
		for _, u := range r.URLParameters {
			switch p.param(u.Name) {
			case Drop:
				continue
			case Hash:
				u.Value = p.hv(u.Value)
			}
			out = append(out, u)
		}
		r.URLParameters = out
	}
	for pi := range r.Pages {
		qs := r.Pages[pi].Questions
		out := qs[:0:0]
		for _, q := range qs {
			switch p.QuestionAction(r.SurveyID, &q) {
			case Drop:
				continue
			case Hash:
				q.Answers = p.hashAnswers(q.Answers)
			}
			out = append(out, q)
		}
		r.Pages[pi].Questions = out
	}
}

// hashAnswers returns copies of as with the respondent's own content
// hashed: text, else the numeric value in decimal; value and file id are
// cleared. Choice ids and labels (the questionnaire's) stay.
func (p *Policy) hashAnswers(as []survey.Answer) []survey.Answer {
	out := make([]survey.Answer, len(as))
	for i, a := range as {
		switch {
		case a.Text != nil && *a.Text != "":
			a.Text = survey.Str(p.hv(*a.Text))
		case a.Value != nil:
			a.Text = survey.Str(p.HashInt(int64(*a.Value)))
		}
		a.Value, a.FileID = nil, nil
		out[i] = a
	}
	return out
}

// Fetcher is what the pipeline reads details through (pipeline.Fetcher).
type Fetcher interface {
	GetResponse(ctx context.Context, surveyID int64, responseID survey.GUID) (*survey.Response, error)
}

// Fetcher returns f with p applied to every detail it returns; f itself
// when p keeps everything.
func (p *Policy) Fetcher(f Fetcher) Fetcher {
	if !p.Enabled() {
		return f
	}
	return fetcher{p, f}
}

type fetcher struct {
	p *Policy
	f Fetcher
}

func (f fetcher) GetResponse(ctx context.Context, surveyID int64, responseID survey.GUID) (*survey.Response, error) {
	r, err := f.f.GetResponse(ctx, surveyID, responseID)
	if err == nil {
		f.p.Apply(r)
	}
	return r, err
}

// WithheldBody is what WebhookBody stores for a body it cannot read (not
// a JSON object): its personal fields cannot be found, so none of it is
// kept.
var WithheldBody = []byte(`{"_withheld":"body is not a JSON object; privacy rules could not be applied"}`)

// WebhookBody returns body with the field rules applied to its top-level
// fields (ip_address, contact_id → contact_id_hash, distribution_id,
// url_parameters), for the raw webhook log. A body needing no change is
// returned as it is; one that is not a JSON object is replaced by
// WithheldBody.
func (p *Policy) WebhookBody(body []byte) []byte {
	if !p.Enabled() {
		return body
	}
	var m map[string]json.RawMessage
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	if err := d.Decode(&m); err != nil || m == nil {
		return WithheldBody
	}
	changed := false
	if v, ok := m["ip_address"]; ok && p.o.IPAddress != Keep && p.o.IPAddress != "" {
		changed = true
		if p.o.IPAddress == Drop {
			delete(m, "ip_address")
		} else {
			m["ip_address"] = quote(p.hv(rawText(v)))
		}
	}
	if _, ok := m["contact_id_hash"]; ok && p.o.ContactID == Drop {
		changed = true // a body stored with a hash (privacy apply of a changed rule)
		delete(m, "contact_id_hash")
	}
	if v, ok := m["contact_id"]; ok && (p.o.ContactID == Drop || p.o.ContactID == Hash) {
		changed = true
		delete(m, "contact_id")
		if t := rawText(v); p.o.ContactID == Hash && t != "" && t != "null" {
			m["contact_id_hash"] = quote(p.Hash(t))
		}
	}
	if _, ok := m["distribution_id"]; ok && p.o.DistributionID == Drop {
		changed = true
		delete(m, "distribution_id")
	}
	if v, ok := m["url_parameters"]; ok {
		if nv, ch := p.webhookParams(v); ch {
			changed = true
			if nv == nil {
				delete(m, "url_parameters")
			} else {
				m["url_parameters"] = nv
			}
		}
	}
	if !changed {
		return body
	}
	out, err := json.Marshal(m)
	if err != nil {
		return WithheldBody
	}
	return out
}

// webhookParams applies the url_parameters rules to a webhook's
// url_parameters, a list of {name, value} or an object of name: value.
func (p *Policy) webhookParams(v json.RawMessage) (json.RawMessage, bool) {
	var list []survey.URLParameter
	if json.Unmarshal(v, &list) == nil {
		r := survey.Response{URLParameters: list}
		q := *p
		q.o.IPAddress, q.o.ContactID, q.o.DistributionID, q.o.Questions = Keep, Keep, Keep, nil
		q.Apply(&r)
		b, _ := json.Marshal(r.URLParameters)
		return b, !bytes.Equal(b, v)
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(v, &obj) != nil {
		return nil, true // neither form: withheld
	}
	changed := false
	for name, val := range obj {
		switch p.param(name) {
		case Drop:
			delete(obj, name)
			changed = true
		case Hash:
			obj[name] = quote(p.hv(rawText(val)))
			changed = true
		}
	}
	if !changed {
		return v, false
	}
	b, _ := json.Marshal(obj)
	return b, true
}

// rawText is a JSON value's text as the service sent it: a string's
// content, a number's decimal digits.
func rawText(v json.RawMessage) string {
	var s string
	if json.Unmarshal(v, &s) == nil {
		return s
	}
	t := strings.TrimSpace(string(v))
	if n, err := strconv.ParseInt(t, 10, 64); err == nil {
		return strconv.FormatInt(n, 10)
	}
	return t
}

func quote(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}
