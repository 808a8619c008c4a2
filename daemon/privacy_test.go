package daemon

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"github.com/surveysync/surveysync/config"
	"github.com/surveysync/surveysync/record"
)

const (
	privKey       = "privacy-e2e-key-0123456789abcdef"
	markerIP      = "marker-ip-7f3a"
	markerContact = int64(918273645)
)

func hmacHex(s string) string {
	m := hmac.New(sha256.New, []byte(privKey))
	m.Write([]byte(s))
	return hex.EncodeToString(m.Sum(nil))
}

type fakeWebhookLog struct{ got []record.WebhookEvent }

func (f *fakeWebhookLog) LogEvents(_ context.Context, evs []record.WebhookEvent) error {
	f.got = append(f.got, evs...)
	return nil
}

// The webhook log stores bodies with the field rules applied, whichever
// command opened the warehouse.
func TestPrivateWebhookLogBody(t *testing.T) {
	cfg := config.Default()
	cfg.Privacy.HashKey = config.Secret(privKey)
	cfg.Privacy.Fields.ContactID = config.ActionHash
	cfg.Privacy.Fields.IPAddress = config.ActionDrop
	p, err := newPolicy(cfg)
	if err != nil || p == nil {
		t.Fatalf("newPolicy: %v %v", p, err)
	}
	f := &fakeWebhookLog{}
	l := privateWebhookLog{f, p}
	body := fmt.Sprintf(`{"event_name":"response_received","survey_id":4574,"contact_id":%d,"ip_address":%q}`, markerContact, markerIP)
	if err := l.LogEvents(context.Background(), []record.WebhookEvent{{EventID: "e1", Body: body}}); err != nil {
		t.Fatal(err)
	}
	got := f.got[0].Body
	if strings.Contains(got, fmt.Sprint(markerContact)) || strings.Contains(got, markerIP) || !strings.Contains(got, hmacHex(fmt.Sprint(markerContact))) {
		t.Errorf("logged body %s", got)
	}
}
