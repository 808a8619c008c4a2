package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// Privacy actions: what happens to a personal field or a question's
// answers before anything is written (docs/privacy.md).
const (
	ActionDrop = "drop" // never written anywhere
	ActionHash = "hash" // keyed HMAC-SHA-256, lowercase hex
	ActionKeep = "keep" // written as the service sends it (the default)
)

// Actions are the values a privacy action may take.
var Actions = []string{ActionDrop, ActionHash, ActionKeep}

// URLParamAny is the url_parameters name that stands for every parameter
// not named on its own.
const URLParamAny = "*"

// MinHashKeyBytes is the shortest hash key accepted: a short key can be
// found by trying keys against a known value.
const MinHashKeyBytes = 16

// Privacy keeps chosen personal data out of everything surveysync writes
// (docs/privacy.md). It is applied once, where a fetched response enters
// the pipeline, and to webhook bodies before they are logged.
type Privacy struct {
	HashKeyFile string         `koanf:"hash_key_file"` // the key's bytes, less one trailing newline
	HashKey     Secret         `koanf:"hash_key"`      // or the key itself (SURVEYSYNC_PRIVACY__HASH_KEY)
	Fields      PrivacyFields  `koanf:"fields"`
	Questions   []QuestionRule `koanf:"questions"` // the first matching rule wins
}

// PrivacyFields is the action for each personal field of a response.
type PrivacyFields struct {
	IPAddress      string            `koanf:"ip_address"`      // drop | hash | keep
	ContactID      string            `koanf:"contact_id"`      // drop | hash (to contact_id_hash) | keep
	DistributionID string            `koanf:"distribution_id"` // drop | keep (not personal by itself; an Int64 column)
	URLParameters  map[string]string `koanf:"url_parameters"`  // parameter name ("*": every other one) → action
}

// QuestionRule selects questions by survey (and question id), variable
// name or question type; every selector given must match. Action applies
// to the answers of the questions it selects.
type QuestionRule struct {
	Survey   int64  `koanf:"survey"`
	Question int64  `koanf:"question"` // needs survey
	Variable string `koanf:"variable"`
	Type     string `koanf:"type"`
	Action   string `koanf:"action"`
}

// Enabled reports whether any rule drops or hashes anything.
func (p Privacy) Enabled() bool {
	return p.uses(ActionDrop) || p.uses(ActionHash)
}

// UsesHash reports whether any rule asks for a hash (a key is then needed).
func (p Privacy) UsesHash() bool { return p.uses(ActionHash) }

func (p Privacy) uses(action string) bool {
	f := p.Fields
	if f.IPAddress == action || f.ContactID == action || f.DistributionID == action {
		return true
	}
	for _, a := range f.URLParameters {
		if a == action {
			return true
		}
	}
	for _, q := range p.Questions {
		if q.Action == action {
			return true
		}
	}
	return false
}

// Key returns the hash key: privacy.hash_key, or the bytes of
// privacy.hash_key_file less one trailing newline. Errors name the key,
// never its value.
func (p Privacy) Key() ([]byte, error) {
	switch {
	case p.HashKey.IsSet() && p.HashKeyFile != "":
		return nil, errors.New("privacy.hash_key and privacy.hash_key_file are both set: keep one")
	case p.HashKey.IsSet():
		k := []byte(p.HashKey.Value())
		if len(k) < MinHashKeyBytes {
			return nil, fmt.Errorf("privacy.hash_key is too short (%d bytes): at least %d (e.g. openssl rand -hex 32)", len(k), MinHashKeyBytes)
		}
		return k, nil
	case p.HashKeyFile != "":
		b, err := readPrivateFile(p.HashKeyFile)
		if err != nil {
			return nil, fmt.Errorf("privacy.hash_key_file (%s) %w", p.HashKeyFile, err)
		}
		b = bytes.TrimSuffix(b, []byte("\n"))
		if len(b) < MinHashKeyBytes {
			return nil, fmt.Errorf("privacy.hash_key_file (%s) holds %d bytes (less one trailing newline): a key needs at least %d (e.g. openssl rand -hex 32 > %s)", p.HashKeyFile, len(b), MinHashKeyBytes, p.HashKeyFile)
		}
		if len(bytes.Trim(b, "\x00")) == 0 {
			return nil, fmt.Errorf("privacy.hash_key_file (%s) holds only zero bytes: it is damaged (zero-filled after a crash or a disk fault); restore the key from its backup (a new key would leave the values hashed so far unmatched)", p.HashKeyFile)
		}
		return b, nil
	}
	return nil, errors.New("privacy: no hash key: set privacy.hash_key_file or SURVEYSYNC_PRIVACY__HASH_KEY")
}

// readPrivateFile reads a file holding a secret, refusing it when group or
// others may access it: such a key may already have leaked, and reading it
// anyway would let that go unnoticed. Errors read as a predicate of the
// file ("cannot be read: …", "may be read by …").
func readPrivateFile(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, fmt.Errorf("cannot be read: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("cannot be read: %w", err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("may be read or changed by its group or others (mode %04o): a key file must be private to the daemon's user; fix: chmod 600 %s (and change the key if others may have read it)", perm, name)
	}
	b, err := io.ReadAll(io.LimitReader(f, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("cannot be read: %w", err)
	}
	return b, nil
}

// action reports whether a is a valid action ("" counts as keep).
func validAction(a string) bool { return a == "" || slices.Contains(Actions, a) }

func (c *Config) validatePrivacy(p *problems) {
	pv := &c.Privacy
	badAction := func(path, a string) bool {
		if !validAction(a) {
			p.add(path, "must be drop, hash or keep (got %q)", a)
			return true
		}
		return false
	}
	badAction("privacy.fields.ip_address", pv.Fields.IPAddress)
	badAction("privacy.fields.contact_id", pv.Fields.ContactID)
	if !badAction("privacy.fields.distribution_id", pv.Fields.DistributionID) && pv.Fields.DistributionID == ActionHash {
		p.add("privacy.fields.distribution_id", "cannot be hashed: it names the channel (an Int64 column), not a person; use drop or keep")
	}
	for _, name := range sortedStrings(pv.Fields.URLParameters) {
		path := "privacy.fields.url_parameters." + name
		if strings.TrimSpace(name) == "" {
			p.add("privacy.fields.url_parameters", "has an empty parameter name (name one, or \"*\" for every parameter)")
			continue
		}
		badAction(path, pv.Fields.URLParameters[name])
	}
	for i, q := range pv.Questions {
		at := fmt.Sprintf("privacy.questions[%d]", i)
		if q.Survey == 0 && q.Variable == "" && q.Type == "" {
			p.add(at, "selects nothing: give survey (with question), variable or type")
		}
		if q.Survey < 0 {
			p.add(at+".survey", "must be a positive survey id (got %d)", q.Survey)
		}
		if q.Question < 0 {
			p.add(at+".question", "must be a positive question id (got %d)", q.Question)
		}
		if q.Question != 0 && q.Survey == 0 {
			p.add(at+".question", "needs survey (question ids are matched with their survey)")
		}
		if q.Action == "" {
			p.add(at+".action", "is required: drop, hash or keep")
			continue
		}
		if badAction(at+".action", q.Action) {
			continue
		}
		if q.Action == ActionHash && q.Type != "" && isUploadType(q.Type, c.Files.TypeMatch) {
			p.add(at+".action", "cannot be hash: type %q is a file upload (files.type_match), and a file cannot be hashed; use drop (the files are not copied) or keep", q.Type)
		}
	}
	if pv.HashKey.IsSet() && pv.HashKeyFile != "" {
		p.add("privacy.hash_key", "and privacy.hash_key_file are both set: keep one")
		return
	}
	if !pv.UsesHash() {
		return
	}
	if !pv.HashKey.IsSet() && pv.HashKeyFile == "" {
		p.add("privacy.hash_key_file", "is required (or SURVEYSYNC_PRIVACY__HASH_KEY): %s asks for hash", firstHash(pv))
		return
	}
	if _, err := pv.Key(); err != nil {
		path, msg, _ := strings.Cut(err.Error(), " ")
		p.add(path, "%s", msg)
	}
}

// firstHash names the first key asking for a hash.
func firstHash(pv *Privacy) string {
	f := pv.Fields
	switch {
	case f.IPAddress == ActionHash:
		return "privacy.fields.ip_address"
	case f.ContactID == ActionHash:
		return "privacy.fields.contact_id"
	}
	for _, name := range sortedStrings(f.URLParameters) {
		if f.URLParameters[name] == ActionHash {
			return "privacy.fields.url_parameters." + name
		}
	}
	for i, q := range pv.Questions {
		if q.Action == ActionHash {
			return fmt.Sprintf("privacy.questions[%d]", i)
		}
	}
	return "privacy"
}

// isUploadType is pipeline/files.IsUploadType (config imports no pipeline
// package): a case-insensitive substring test against files.type_match.
func isUploadType(questionType string, typeMatch []string) bool {
	if len(typeMatch) == 0 {
		typeMatch = []string{"file", "upload"}
	}
	t := strings.ToLower(questionType)
	for _, m := range typeMatch {
		if m = strings.ToLower(strings.TrimSpace(m)); m != "" && strings.Contains(t, m) {
			return true
		}
	}
	return false
}
