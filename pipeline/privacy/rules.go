package privacy

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/surveysync/surveysync/survey"
)

// Changing the rules on an existing warehouse (docs/privacy.md): the
// warehouse records the Rules in effect when data was written. At start
// the daemon compares them with the configured ones (Compare): a stricter
// rule (a field or question newly dropped or hashed, a changed hash key)
// makes it refuse until surveysync privacy apply has rewritten the data
// already written (Delta says how); a looser one applies to new data only.

// Clear is Delta's action for a value hashed under a former key: it
// cannot be hashed again (the value is gone), so it is emptied, the row
// kept.
const Clear Action = "clear"

// RulesVersion is the version of the Rules format.
const RulesVersion = 1

// Rules are the privacy rules as a warehouse records them: every action,
// and a keyed fingerprint of the hash key (the key itself is never
// stored).
type Rules struct {
	Version int `json:"version"`
	// KeyFingerprint is the first 16 hex digits of the HMAC-SHA-256 of a
	// fixed text under the key; "" when no rule hashes.
	KeyFingerprint string            `json:"key_fingerprint,omitempty"`
	IPAddress      Action            `json:"ip_address"`
	ContactID      Action            `json:"contact_id"`
	DistributionID Action            `json:"distribution_id"`
	URLParameters  map[string]Action `json:"url_parameters,omitempty"`
	Questions      []Rule            `json:"questions,omitempty"`
	TypeMatch      []string          `json:"type_match,omitempty"`
}

func norm(a Action) Action {
	if a == "" {
		return Keep
	}
	return a
}

// Rules returns the record of o.
func (o Options) Rules() Rules {
	r := Rules{Version: RulesVersion, IPAddress: norm(o.IPAddress), ContactID: norm(o.ContactID), DistributionID: norm(o.DistributionID),
		TypeMatch: slices.Clone(o.TypeMatch)}
	for name, a := range o.URLParameters {
		if r.URLParameters == nil {
			r.URLParameters = map[string]Action{}
		}
		r.URLParameters[name] = norm(a)
	}
	for _, q := range o.Questions {
		q.Action = norm(q.Action)
		r.Questions = append(r.Questions, q)
	}
	if r.hashes() && len(o.Key) > 0 {
		r.KeyFingerprint = KeyFingerprint(o.Key)
	}
	return r
}

// KeyFingerprint identifies a key without revealing it: a keyed hash of a
// fixed text, 16 hex digits.
func KeyFingerprint(key []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("surveysync privacy key fingerprint v1"))
	return hex.EncodeToString(m.Sum(nil))[:16]
}

// hashes reports whether any rule hashes.
func (r Rules) hashes() bool {
	if r.IPAddress == Hash || r.ContactID == Hash || r.DistributionID == Hash {
		return true
	}
	for _, a := range r.URLParameters {
		if a == Hash {
			return true
		}
	}
	for _, q := range r.Questions {
		if q.Action == Hash {
			return true
		}
	}
	return false
}

// policy is a Policy applying r (key may be nil when nothing is hashed
// with it).
func (r Rules) policy(key []byte) *Policy {
	p := &Policy{o: Options{Key: key, IPAddress: norm(r.IPAddress), ContactID: norm(r.ContactID), DistributionID: norm(r.DistributionID),
		URLParameters: r.URLParameters, Questions: r.Questions, TypeMatch: r.TypeMatch}, paramAny: Keep, enabled: true}
	if a, ok := r.URLParameters["*"]; ok {
		p.paramAny = norm(a)
	}
	return p
}

// Change is one difference between recorded and configured rules.
type Change struct {
	// Rule names it as the configuration does: privacy.fields.ip_address,
	// privacy.fields.url_parameters.email, privacy.questions[2]
	// {type: essay}, privacy.hash_key.
	Rule     string
	From, To Action // "" for a rule that is added or removed
	// Stricter: data already written must be rewritten (surveysync
	// privacy apply); otherwise the change applies to new data only.
	Stricter bool
	Note     string
}

func (c Change) String() string {
	from, to := string(c.From), string(c.To)
	if from == "" {
		from = "(none)"
	}
	if to == "" {
		to = "(none)"
	}
	s := fmt.Sprintf("%s: %s → %s", c.Rule, from, to)
	if c.From == c.To && c.From != "" {
		s = fmt.Sprintf("%s: %s", c.Rule, c.To)
	}
	if c.Note != "" {
		s += " (" + c.Note + ")"
	}
	return s
}

// Diff lists the changes from recorded to configured rules.
type Diff []Change

// Stricter are the changes that need privacy apply.
func (d Diff) Stricter() Diff {
	var out Diff
	for _, c := range d {
		if c.Stricter {
			out = append(out, c)
		}
	}
	return out
}

// Looser are the changes that apply to new data only.
func (d Diff) Looser() Diff {
	var out Diff
	for _, c := range d {
		if !c.Stricter {
			out = append(out, c)
		}
	}
	return out
}

func (d Diff) String() string {
	parts := make([]string, len(d))
	for i, c := range d {
		parts[i] = c.String()
	}
	return strings.Join(parts, "; ")
}

// stricter reports whether data written under from must be rewritten to
// look written under to: a value kept is now dropped or hashed, a hashed
// one dropped, or hashed under a changed key.
func stricter(from, to Action, keyChanged bool) bool {
	from, to = norm(from), norm(to)
	switch {
	case from == Drop:
		return false // nothing was written
	case to == Drop:
		return true
	case to == Hash:
		return from == Keep || keyChanged
	}
	return false
}

// keyChanged reports whether values hashed under old are not hashed under
// new's key.
func keyChanged(old, new Rules) bool {
	return old.KeyFingerprint != "" && new.KeyFingerprint != "" && old.KeyFingerprint != new.KeyFingerprint
}

// Compare lists the changes from the recorded rules old to the configured
// rules new. Question rules are paired by their selectors; a rule that
// moved, a keep rule removed, or a hash rule removed ahead of a drop rule
// may make other rules match some questions, and counts as stricter
// (privacy apply then finds, question by question, what is to do).
func Compare(old, new Rules) Diff {
	var d Diff
	kc := keyChanged(old, new)
	if kc {
		d = append(d, Change{Rule: "privacy.hash_key", From: Hash, To: Hash, Stricter: true,
			Note: "the key changed: values hashed with the former key cannot be hashed again and are emptied"})
	}
	field := func(name string, from, to Action) {
		from, to = norm(from), norm(to)
		if from == to && !(from == Hash && kc) {
			return
		}
		c := Change{Rule: "privacy.fields." + name, From: from, To: to, Stricter: stricter(from, to, kc)}
		if from == to {
			c.Note = "hashed with the former key"
		}
		d = append(d, c)
	}
	field("ip_address", old.IPAddress, new.IPAddress)
	field("contact_id", old.ContactID, new.ContactID)
	field("distribution_id", old.DistributionID, new.DistributionID)
	op, np := old.policy(nil), new.policy(nil)
	var names []string
	for n := range old.URLParameters {
		names = append(names, n)
	}
	for n := range new.URLParameters {
		if _, ok := old.URLParameters[n]; !ok {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		from, to := op.param(n), np.param(n)
		if n == "*" {
			from, to = op.paramAny, np.paramAny
		}
		field("url_parameters."+n, from, to)
	}
	d = append(d, compareQuestions(old.Questions, new.Questions, kc)...)
	if !slices.Equal(old.TypeMatch, new.TypeMatch) && (hasAction(new.Questions, Hash) || hasAction(old.Questions, Hash)) {
		d = append(d, Change{Rule: "files.type_match", Stricter: true,
			Note: "decides which hashed questions are uploads (dropped)"})
	}
	return d
}

func hasAction(rs []Rule, a Action) bool {
	return slices.ContainsFunc(rs, func(r Rule) bool { return norm(r.Action) == a })
}

// selector is a question rule without its action.
func selector(r Rule) Rule {
	r.Action = ""
	r.Type = strings.ToLower(r.Type)
	return r
}

// describe names a question rule as the configuration writes it.
func describe(i int, r Rule) string {
	var parts []string
	if r.Survey != 0 {
		parts = append(parts, fmt.Sprintf("survey: %d", r.Survey))
	}
	if r.Question != 0 {
		parts = append(parts, fmt.Sprintf("question: %d", r.Question))
	}
	if r.Variable != "" {
		parts = append(parts, "variable: "+r.Variable)
	}
	if r.Type != "" {
		parts = append(parts, "type: "+r.Type)
	}
	return fmt.Sprintf("privacy.questions[%d] {%s}", i, strings.Join(parts, ", "))
}

func compareQuestions(old, new []Rule, kc bool) Diff {
	var d Diff
	oldAt := map[Rule]int{}
	for i, r := range old {
		if _, ok := oldAt[selector(r)]; !ok {
			oldAt[selector(r)] = i
		}
	}
	newAt := map[Rule]int{}
	for i, r := range new {
		if _, ok := newAt[selector(r)]; !ok {
			newAt[selector(r)] = i
		}
	}
	lastOld := -1 // the position in old of the previous paired rule
	for i, r := range new {
		j, ok := oldAt[selector(r)]
		if !ok || newAt[selector(r)] != i {
			to := norm(r.Action)
			d = append(d, Change{Rule: describe(i, r), To: to, Stricter: to != Keep, Note: "added"})
			continue
		}
		from, to := norm(old[j].Action), norm(r.Action)
		moved := j < lastOld
		lastOld = max(lastOld, j)
		switch {
		case moved:
			d = append(d, Change{Rule: describe(i, r), From: from, To: to, Stricter: true, Note: "moved: rules after it may now match first"})
		case from != to || (from == Hash && kc):
			c := Change{Rule: describe(i, r), From: from, To: to, Stricter: stricter(from, to, kc)}
			if from == to {
				c.Note = "hashed with the former key"
			}
			d = append(d, c)
		}
	}
	for j, r := range old {
		if _, ok := newAt[selector(r)]; ok && oldAt[selector(r)] == j {
			continue
		}
		from := norm(r.Action)
		// Without it, the questions it matched fall to another rule: a
		// keep removed may let a drop or a hash match; a hash removed, a
		// drop.
		strict := (from == Keep && (hasAction(new, Drop) || hasAction(new, Hash))) || (from == Hash && hasAction(new, Drop))
		d = append(d, Change{Rule: describe(j, r), From: from, Stricter: strict, Note: "removed"})
	}
	return d
}

// Delta is what surveysync privacy apply does to data written under the
// recorded rules so that it looks written under the configured ones. Its
// actions are Drop (empty the value; remove a question's answers rows),
// Hash (replace the value by its hash; a value that already has a hash's
// form, IsHash, is left alone, so that running it again after a crash
// changes nothing), Clear (a hash under a former key: empty it, keep the
// row) and Keep (nothing to do).
type Delta struct {
	old, new *Policy
	kc       bool
	fields   *Policy // the field actions of the delta, for webhook bodies
}

// NewDelta returns the Delta from recorded rules old to configured rules
// new; key is the configured hash key (nil when nothing hashes).
func NewDelta(old, new Rules, key []byte) *Delta {
	d := &Delta{old: old.policy(nil), new: new.policy(key), kc: keyChanged(old, new)}
	f := &Policy{o: Options{Key: key, IPAddress: d.Field("ip_address"), ContactID: d.Field("contact_id"), DistributionID: d.Field("distribution_id"),
		URLParameters: map[string]Action{}}, enabled: true, guard: true, paramAny: Keep}
	for _, a := range []*Action{&f.o.IPAddress, &f.o.ContactID, &f.o.DistributionID} {
		if *a == Clear {
			*a = Drop
		}
	}
	names := map[string]bool{"*": true}
	for n := range old.URLParameters {
		names[n] = true
	}
	for n := range new.URLParameters {
		names[n] = true
	}
	for n := range names {
		a := d.Param(n)
		if a == Clear {
			a = Drop
		}
		f.o.URLParameters[n] = a
		if n == "*" {
			f.paramAny = a
		}
	}
	d.fields = f
	return d
}

// delta is the action on a value written under from, now under to.
func delta(from, to Action, kc bool) Action {
	from, to = norm(from), norm(to)
	switch {
	case from == Drop:
		return Keep
	case to == Drop:
		return Drop
	case to == Hash && from == Keep:
		return Hash
	case to == Hash && from == Hash && kc:
		return Clear
	}
	return Keep
}

// Field is the action on a field already written: ip_address, contact_id
// or distribution_id. For contact_id, Hash moves the id to its hash
// (contact_id_hash) and Clear empties contact_id_hash.
func (d *Delta) Field(name string) Action {
	switch name {
	case "ip_address":
		return delta(d.old.o.IPAddress, d.new.o.IPAddress, d.kc)
	case "contact_id":
		return delta(d.old.o.ContactID, d.new.o.ContactID, d.kc)
	case "distribution_id":
		return delta(d.old.o.DistributionID, d.new.o.DistributionID, d.kc)
	}
	return Keep
}

// Param is the action on the value of URL parameter name ("*": any
// parameter not named in either rules).
func (d *Delta) Param(name string) Action {
	if name == "*" {
		return delta(d.old.paramAny, d.new.paramAny, d.kc)
	}
	return delta(d.old.param(name), d.new.param(name), d.kc)
}

// Params reports whether any URL parameter is to change.
func (d *Delta) Params() bool {
	for n := range d.fields.o.URLParameters {
		if d.Param(n) != Keep {
			return true
		}
	}
	return false
}

// Question is the action on the answers of a question already written
// (Drop: remove its rows; Hash: hash text, else value; Clear: empty the
// hashed text).
func (d *Delta) Question(surveyID, questionID int64, qtype, variable string) Action {
	sq := &survey.Question{ID: questionID, Type: qtype, Variable: variable}
	return delta(d.old.QuestionAction(surveyID, sq), d.new.QuestionAction(surveyID, sq), d.kc)
}

// Questions reports whether a question rule may change written answers
// (then the answers are scanned question by question).
func (d *Delta) Questions() bool {
	return !slices.Equal(d.old.o.Questions, d.new.o.Questions) || d.kc || d.Params() ||
		!slices.Equal(d.old.o.TypeMatch, d.new.o.TypeMatch)
}

// Empty reports whether nothing written needs to change.
func (d *Delta) Empty() bool {
	return d.Field("ip_address") == Keep && d.Field("contact_id") == Keep && d.Field("distribution_id") == Keep &&
		!d.Params() && !d.Questions()
}

// Hash is the stored form of a value to hash (Hash's action): its hash,
// or the value itself when it already is one.
func (d *Delta) Hash(s string) string { return d.new.hvGuard(s) }

// HashInt is the hash of n in decimal (a contact id, a numeric answer).
func (d *Delta) HashInt(n int64) string { return d.new.HashInt(n) }

// WebhookBody applies the field actions to a stored webhook body (a value
// already hashed is left as it is).
func (d *Delta) WebhookBody(body []byte) []byte {
	if d.Field("ip_address") == Keep && d.Field("contact_id") == Keep && d.Field("distribution_id") == Keep && !d.Params() {
		return body
	}
	return d.fields.WebhookBody(body)
}

func (p *Policy) hvGuard(s string) string {
	if IsHash(s) {
		return s
	}
	return p.Hash(s)
}
