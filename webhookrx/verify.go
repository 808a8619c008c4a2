package webhookrx

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// allowedSource reports whether the connection's source address is in the
// allow-list (always true without one). X-Forwarded-For is not trusted:
// behind a proxy, list the proxy's address.
func (s *settings) allowedSource(remoteAddr string) bool {
	if len(s.allow) == 0 {
		return true
	}
	ap, err := netip.ParseAddrPort(remoteAddr)
	var a netip.Addr
	if err == nil {
		a = ap.Addr()
	} else if a, err = netip.ParseAddr(remoteAddr); err != nil {
		return false
	}
	a = a.Unmap().WithZone("")
	for _, p := range s.allow {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// pathMatches compares the request path with the secret path in constant time.
func (s *settings) pathMatches(p string) bool {
	return subtle.ConstantTimeCompare([]byte(p), []byte(s.Path)) == 1
}

// basicAuthOK checks HTTP basic auth when configured.
func (s *settings) basicAuthOK(r *http.Request) bool {
	if s.BasicAuthUser == "" {
		return true
	}
	u, p, ok := r.BasicAuth()
	if !ok {
		return false
	}
	hu, wu := sha256.Sum256([]byte(u)), sha256.Sum256([]byte(s.BasicAuthUser))
	hp, wp := sha256.Sum256([]byte(p)), sha256.Sum256([]byte(s.BasicAuthPassword))
	return subtle.ConstantTimeCompare(hu[:], wu[:])&subtle.ConstantTimeCompare(hp[:], wp[:]) == 1
}

var errNoSignature = errors.New("no Standard Webhooks signature")

// verifySignature checks the Standard Webhooks headers: the HMAC-SHA256 of
// "id.timestamp.body" under the secret, base64, in one of the
// space-separated "v1,<sig>" entries of webhook-signature; the timestamp
// (unix seconds) within the tolerance of now. It returns errNoSignature when
// neither webhook-signature nor webhook-timestamp is present. Errors never
// contain the secret.
func (s *settings) verifySignature(h http.Header, body []byte, now time.Time) error {
	id, ts, sigs := h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature")
	if ts == "" && sigs == "" {
		return errNoSignature
	}
	if id == "" || ts == "" || sigs == "" {
		return errors.New("incomplete Standard Webhooks headers: webhook-id, webhook-timestamp and webhook-signature are all needed")
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("webhook-timestamp %q is not unix seconds", ts)
	}
	if d := now.Sub(time.Unix(sec, 0)); d > s.SignatureTolerance || d < -s.SignatureTolerance {
		return fmt.Errorf("webhook-timestamp is %s away from now (tolerance %s)", d.Round(time.Second), s.SignatureTolerance)
	}
	mac := hmac.New(sha256.New, s.swKey)
	mac.Write([]byte(id))
	mac.Write([]byte{'.'})
	mac.Write([]byte(ts))
	mac.Write([]byte{'.'})
	mac.Write(body)
	want := mac.Sum(nil)
	for _, f := range strings.Fields(sigs) {
		v, sig, ok := strings.Cut(f, ",")
		if !ok || v != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(sig)
		if err != nil {
			continue
		}
		if hmac.Equal(got, want) {
			return nil
		}
	}
	return errors.New("no webhook-signature entry matches")
}

// Sign returns a Standard Webhooks webhook-signature value ("v1,<base64>")
// for id, timestamp and body under secret (same forms as
// Options.StandardWebhooksSecret). For tests and senders.
func Sign(secret, id string, ts time.Time, body []byte) (string, error) {
	s, err := Options{Path: "/", SpoolDir: ".", StandardWebhooksSecret: secret}.resolve()
	if err != nil {
		return "", err
	}
	mac := hmac.New(sha256.New, s.swKey)
	fmt.Fprintf(mac, "%s.%d.", id, ts.Unix())
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil)), nil
}
