package config

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A configured Standard Webhooks secret makes the signature required; only
// an explicit require_signature: false (file or environment) keeps
// accepting unsigned requests, which the daemon warns about.
func TestSignatureRequiredByTheSecret(t *testing.T) {
	const key = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	base := []string{
		"SURVEYSYNC_WEBHOOKS__ENABLED=true",
		"SURVEYSYNC_WEBHOOKS__PATH=/hooks/9f1c2a7e5b3d4c6f8a0e1b2c",
	}
	for _, c := range []struct {
		name             string
		env              []string
		required, warned bool
	}{
		{"no secret", nil, false, false},
		{"secret, require_signature unset", []string{"SURVEYSYNC_WEBHOOKS__STANDARD_WEBHOOKS_SECRET=" + key}, true, false},
		{"secret, require_signature false", []string{"SURVEYSYNC_WEBHOOKS__STANDARD_WEBHOOKS_SECRET=" + key, "SURVEYSYNC_WEBHOOKS__REQUIRE_SIGNATURE=false"}, false, true},
		{"secret, require_signature true", []string{"SURVEYSYNC_WEBHOOKS__STANDARD_WEBHOOKS_SECRET=" + key, "SURVEYSYNC_WEBHOOKS__REQUIRE_SIGNATURE=true"}, true, false},
		{"no secret, require_signature false", []string{"SURVEYSYNC_WEBHOOKS__REQUIRE_SIGNATURE=false"}, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := Load("", append(append([]string{}, base...), c.env...), nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := cfg.Webhooks.SignatureRequired(); got != c.required {
				t.Errorf("SignatureRequired = %v, want %v", got, c.required)
			}
			if got := cfg.Webhooks.UnsignedAllowed(); got != c.warned {
				t.Errorf("UnsignedAllowed = %v, want %v", got, c.warned)
			}
			roundTrip(t, cfg)
		})
	}

	// In a file: an empty value is unset, false is false.
	dir := t.TempDir()
	for yaml, want := range map[string]bool{"require_signature:\n": true, "require_signature: false\n": false} {
		p := filepath.Join(dir, "c.yaml")
		doc := "api:\n  token: secret-token-value\n  user_agent: \"acme (ops@acme.example)\"\nwebhooks:\n  enabled: true\n  path: /hooks/9f1c2a7e5b3d4c6f8a0e1b2c\n  standard_webhooks_secret: " + key + "\n  " + yaml
		if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := Load(p, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Webhooks.SignatureRequired() != want {
			t.Errorf("%q: SignatureRequired = %v, want %v", yaml, cfg.Webhooks.SignatureRequired(), want)
		}
	}
}

// Keys shorter than 16 bytes (raw, or decoded from whsec_) are refused,
// naming the key and never printing it; require_signature: true without a
// secret too.
func TestShortSignatureKeysRefused(t *testing.T) {
	base := []string{
		"SURVEYSYNC_WEBHOOKS__ENABLED=true",
		"SURVEYSYNC_WEBHOOKS__PATH=/hooks/9f1c2a7e5b3d4c6f8a0e1b2c",
	}
	for secret, want := range map[string]string{
		"hunter2-hunter2": "webhooks.standard_webhooks_secret must be a key of at least 16 bytes (this raw key has 15; value hidden)",
		"whsec_" + base64.StdEncoding.EncodeToString([]byte("hunter2-hunter2")): "webhooks.standard_webhooks_secret must be a key of at least 16 bytes (this one decodes to 15; value hidden)",
	} {
		_, err := Load("", append(append([]string{}, base...), "SURVEYSYNC_WEBHOOKS__STANDARD_WEBHOOKS_SECRET="+secret), nil)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("secret of 15 bytes: %v, want %q", err, want)
			continue
		}
		if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), secret) {
			t.Errorf("the error prints the secret: %v", err)
		}
	}
	if _, err := Load("", append(append([]string{}, base...), "SURVEYSYNC_WEBHOOKS__STANDARD_WEBHOOKS_SECRET=0123456789abcdef"), nil); err != nil {
		t.Errorf("a 16-byte raw key: %v", err)
	}
	_, err := Load("", append(append([]string{}, base...), "SURVEYSYNC_WEBHOOKS__REQUIRE_SIGNATURE=true"), nil)
	if err == nil || !strings.Contains(err.Error(), "webhooks.require_signature") {
		t.Errorf("require_signature without a secret: %v", err)
	}
}
