package config

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
)

// masked is what every secret prints as.
const masked = "***"

// Secret is a configuration value that must never be printed: API tokens,
// passwords, keys. Every way of formatting it (String, %v, %+v, %#v, %q,
// %x, JSON, text, YAML, slog) gives "***", or "" when it is empty, so a
// Secret can sit in a struct that is logged or printed whole. Value returns
// the real value for the one caller that needs it.
type Secret string

// Value returns the secret itself. Call it only where the value is used
// (an HTTP header, a driver option), never to log or wrap it in an error.
func (s Secret) Value() string { return string(s) }

// IsSet reports whether the secret is non-empty.
func (s Secret) IsSet() bool { return s != "" }

func (s Secret) String() string { return maskIf(string(s) != "") }

// Format makes every fmt verb print the masked form.
func (s Secret) Format(f fmt.State, verb rune) { formatMasked(f, verb, s.String()) }

// GoString masks %#v when Format is bypassed.
func (s Secret) GoString() string { return fmt.Sprintf("%q", s.String()) }

// MarshalText masks the secret in encoders that use text (YAML, XML, maps).
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// MarshalJSON masks the secret in JSON.
func (s Secret) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// LogValue masks the secret in slog records.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// URL is a URL from the configuration (api.base_url, files.url). It prints
// with any password in its userinfo and any credential-looking query
// parameter (sig, secret, password, token, key, credential) masked; Value
// returns it unmasked.
type URL string

// Value returns the URL as configured, credentials included.
func (u URL) Value() string { return string(u) }

func (u URL) String() string { return maskURL(string(u)) }

// Format makes every fmt verb print the masked form.
func (u URL) Format(f fmt.State, verb rune) { formatMasked(f, verb, u.String()) }

// GoString masks %#v when Format is bypassed.
func (u URL) GoString() string { return fmt.Sprintf("%q", u.String()) }

// MarshalText masks credentials in text encoders.
func (u URL) MarshalText() ([]byte, error) { return []byte(u.String()), nil }

// MarshalJSON masks credentials in JSON.
func (u URL) MarshalJSON() ([]byte, error) { return json.Marshal(u.String()) }

// LogValue masks credentials in slog records.
func (u URL) LogValue() slog.Value { return slog.StringValue(u.String()) }

// SecretPath is a URL path with a secret segment in it (webhooks.path, e.g.
// "/hooks/3f9c0a7e1b2d4c5f8a6e"). It prints with every segment of
// MinPathSecret characters or more replaced by "***" ("/hooks/***"); Value
// returns the path itself, for routing.
type SecretPath string

// MinPathSecret is the length from which a path segment counts as the
// secret of a SecretPath (and the length webhooks.path must have one of).
const MinPathSecret = 16

// Value returns the path itself.
func (p SecretPath) Value() string { return string(p) }

func (p SecretPath) String() string {
	segs := strings.Split(string(p), "/")
	for i, s := range segs {
		if len(s) >= MinPathSecret {
			segs[i] = masked
		}
	}
	return strings.Join(segs, "/")
}

// Format makes every fmt verb print the masked form.
func (p SecretPath) Format(f fmt.State, verb rune) { formatMasked(f, verb, p.String()) }

// GoString masks %#v when Format is bypassed.
func (p SecretPath) GoString() string { return fmt.Sprintf("%q", p.String()) }

// MarshalText masks the secret segment in text encoders.
func (p SecretPath) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// MarshalJSON masks the secret segment in JSON.
func (p SecretPath) MarshalJSON() ([]byte, error) { return json.Marshal(p.String()) }

// LogValue masks the secret segment in slog records.
func (p SecretPath) LogValue() slog.Value { return slog.StringValue(p.String()) }

func maskIf(set bool) string {
	if set {
		return masked
	}
	return ""
}

func formatMasked(f fmt.State, verb rune, s string) {
	switch verb {
	case 'q':
		fmt.Fprintf(f, "%q", s)
	case 'v':
		if f.Flag('#') {
			fmt.Fprintf(f, "%q", s)
			return
		}
		fmt.Fprint(f, s)
	default:
		fmt.Fprint(f, s)
	}
}

// maskURL hides the password of the userinfo and the values of query
// parameters whose names look like credentials. A string that does not
// parse is returned masked whole if it has an '@' (it may hold a password),
// as is otherwise.
func maskURL(s string) string {
	if s == "" {
		return ""
	}
	u, err := url.Parse(s)
	if err != nil {
		if strings.Contains(s, "@") {
			return masked
		}
		return s
	}
	if u.User != nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), maskPlaceholder)
		}
	}
	if u.RawQuery != "" {
		q := u.Query()
		changed := false
		for k := range q {
			if credentialParam(k) {
				q[k] = []string{maskPlaceholder}
				changed = true
			}
		}
		if changed {
			u.RawQuery = q.Encode()
		}
	}
	// url.URL escapes '*', so substitute the mask after formatting.
	return strings.ReplaceAll(u.String(), maskPlaceholder, masked)
}

const maskPlaceholder = "SURVEYSYNCMASKEDVALUE"

func credentialParam(name string) bool {
	n := strings.ToLower(name)
	for _, w := range []string{"sig", "secret", "password", "passwd", "token", "key", "credential"} {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}
