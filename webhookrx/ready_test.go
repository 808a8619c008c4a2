package webhookrx

import (
	"net/http"
	"testing"

	"github.com/surveysync/surveysync/internal/testkit/diskfault"
)

// The spool's disk fills (or its folder turns read-only): the webhook
// gets 503 and Ready fails. Once the disk is freed, Ready succeeds again
// by itself, before any other webhook arrives (a load balancer routing by
// readiness sends none), and the next webhook is taken.
func TestReadyRecoversWithoutTrafficAfterSpoolDiskFreed(t *testing.T) {
	d := diskfault.New(t, 1)
	p := newRecorder()
	rx := start(t, testOptions(t, d.Path), p, nil)
	if st, body, _ := post(t, rx.url, responseBody(0), nil); st != http.StatusOK {
		t.Fatalf("first event: %d %s", st, body)
	}
	d.Break(t)
	// Pages the database already has may still take a few events: post
	// until the spool refuses one.
	n := 1
	for ; ; n++ {
		st, body, _ := post(t, rx.url, responseBody(n), nil)
		if st == http.StatusServiceUnavailable {
			break
		}
		if st != http.StatusOK || n > 200 {
			t.Fatalf("event %d on a %s spool: %d %s, want 503 soon", n, d.Kind(), st, body)
		}
	}
	if err := rx.r.Ready(); err == nil {
		t.Fatalf("Ready with a %s spool: nil", d.Kind())
	} else {
		t.Logf("Ready (%s): %v", d.Kind(), err)
	}
	d.Heal(t)
	if err := rx.r.Ready(); err != nil {
		t.Fatalf("Ready once the spool is writable again, with no webhook since: %v", err)
	}
	if st, body, _ := post(t, rx.url, responseBody(n), nil); st != http.StatusOK {
		t.Fatalf("event after the disk was freed: %d %s", st, body)
	}
	waitFor(t, "every accepted event processed", func() bool { return len(p.processed()) >= n+1 })
}
