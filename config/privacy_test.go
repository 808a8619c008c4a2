package config

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPrivacyFromEnvAndKeyFile(t *testing.T) {
	env := []string{
		"SURVEYSYNC_PRIVACY__HASH_KEY=k3y-from-the-environment",
		"SURVEYSYNC_PRIVACY__FIELDS__CONTACT_ID=hash",
		"SURVEYSYNC_PRIVACY__FIELDS__URL_PARAMETERS__EMAIL=drop",
	}
	c, err := Load("testdata/good/minimal.yaml", env, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Privacy.Fields.ContactID != ActionHash || c.Privacy.Fields.URLParameters["email"] != ActionDrop {
		t.Fatalf("privacy from env: %+v", c.Privacy.Fields)
	}
	if !c.Privacy.Enabled() || !c.Privacy.UsesHash() {
		t.Error("Enabled/UsesHash false")
	}
	k, err := c.Privacy.Key()
	if err != nil || string(k) != "k3y-from-the-environment" {
		t.Fatalf("Key() = %q, %v", k, err)
	}
	var buf bytes.Buffer
	if err := c.Print(&buf); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "k3y-from") || !strings.Contains(buf.String(), "hash_key: '***'") {
		t.Errorf("config print shows the hash key, or does not mask it:\n%s", buf.String())
	}

	// The key file's bytes, less exactly one trailing newline.
	dir := t.TempDir()
	for content, want := range map[string]string{
		"0123456789abcdef\n":   "0123456789abcdef",
		"0123456789abcdef\n\n": "0123456789abcdef\n",
		"0123456789abcdef ":    "0123456789abcdef ",
	} {
		f := filepath.Join(dir, "hash.key")
		if err := os.WriteFile(f, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		p := Privacy{HashKeyFile: f}
		k, err := p.Key()
		if err != nil || string(k) != want {
			t.Errorf("key file %q: Key() = %q, %v; want %q", content, k, err, want)
		}
	}
	_, err = Privacy{HashKeyFile: filepath.Join(dir, "missing.key")}.Key()
	if err == nil || !strings.Contains(err.Error(), "privacy.hash_key_file") {
		t.Errorf("missing key file: %v", err)
	}
}

func TestPrivacyDefaultsKeepEverything(t *testing.T) {
	c := Default()
	if c.Privacy.Enabled() || c.Privacy.UsesHash() {
		t.Errorf("default privacy drops or hashes something: %+v", c.Privacy)
	}
	// A keep-only configuration needs no key.
	c.Privacy.Questions = []QuestionRule{{Type: "essay", Action: ActionKeep}}
	if err := c.Validate(); err != nil {
		t.Error(err)
	}
}

func TestPrivacyQuestionRuleFromEnvByIndex(t *testing.T) {
	f := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(f, []byte("api: {token: t0ken-value, user_agent: \"a (b@c.de)\"}\nprivacy:\n  questions:\n    - {type: essay, action: keep}\n"), 0o600)
	c, err := Load(f, []string{"SURVEYSYNC_PRIVACY__QUESTIONS__0__ACTION=drop"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Privacy.Questions[0]; got.Type != "essay" || got.Action != ActionDrop {
		t.Errorf("questions[0] = %+v", got)
	}
	_, err = Load(f, []string{"SURVEYSYNC_PRIVACY__QUESTIONS__1__ACTION=drop"}, nil)
	if err == nil || !strings.Contains(err.Error(), "there is no privacy.questions[1]") {
		t.Errorf("adding a rule from the environment: %v", err)
	}
}

// A hash key file that group or others may read is refused, naming the
// file and the fix, whatever its content; the key never shows.
func TestPrivacyKeyFileMustBePrivate(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "hash.key")
	const key = "s3cr3t-privacy-hash-key-0123456789"
	if err := os.WriteFile(f, []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(dir, "c.yaml")
	doc := "api: {token: t0ken-value, user_agent: \"a (b@c.de)\"}\nprivacy:\n  hash_key_file: " + f + "\n  fields:\n    contact_id: hash\n"
	if err := os.WriteFile(cfgFile, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(cfgFile, nil, nil); err != nil {
		t.Fatalf("a 0600 key file: %v", err)
	}
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o620} {
		if err := os.Chmod(f, mode); err != nil {
			t.Fatal(err)
		}
		_, err := Load(cfgFile, nil, nil)
		want := fmt.Sprintf("privacy.hash_key_file (%s) may be read or changed by its group or others (mode %04o): a key file must be private to the daemon's user; fix: chmod 600 %s", f, mode, f)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("mode %04o: %v\nwant %q", mode, err, want)
			continue
		}
		if strings.Contains(err.Error(), key) {
			t.Errorf("the error shows the key: %v", err)
		}
	}
	if err := os.Chmod(f, 0o400); err != nil {
		t.Fatal(err)
	}
	if k, err := (Privacy{HashKeyFile: f}).Key(); err != nil || string(k) != key {
		t.Errorf("a 0400 key file: %q, %v", k, err)
	}
}

// A zero-filled key file (a crash, a disk fault) is damage, not a new key:
// refused with the fix (restore it), never taken as a key change.
func TestPrivacyZeroFilledKeyFileRefused(t *testing.T) {
	f := filepath.Join(t.TempDir(), "hash.key")
	if err := os.WriteFile(f, make([]byte, 33), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := (Privacy{HashKeyFile: f}).Key()
	if err == nil || !strings.Contains(err.Error(), f) || !strings.Contains(err.Error(), "damaged") || !strings.Contains(err.Error(), "restore the key") {
		t.Errorf("a zero-filled key file: %v", err)
	}
}
