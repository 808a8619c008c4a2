package config

import (
	"bytes"
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
