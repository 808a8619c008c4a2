package webhookrx

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/surveysync/surveysync/survey"
)

// erasedSet is a mutable Options.Erased.
type erasedSet struct {
	mu  sync.Mutex
	ids map[survey.GUID]bool
}

func (e *erasedSet) erased(_ int64, id survey.GUID) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.ids[id]
}

func (e *erasedSet) add(id survey.GUID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ids == nil {
		e.ids = map[survey.GUID]bool{}
	}
	e.ids[id] = true
}

// grepDir reports the files under dir holding needle.
func grepDir(t *testing.T, dir, needle string) []string {
	t.Helper()
	var hits []string
	err := filepath.WalkDir(dir, func(path string, de os.DirEntry, err error) error {
		if err != nil || de.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.Contains(b, []byte(needle)) {
			hits = append(hits, filepath.Base(path))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return hits
}

const (
	clearContact  = "4998745"
	hashedContact = "hashed-contact-7f3a"
)

func redactContact(body []byte) []byte {
	return bytes.ReplaceAll(body, []byte(`"contact_id":`+clearContact), []byte(`"contact_id_hash":"`+hashedContact+`"`))
}

// With Redact, the body is rewritten before it is spooled: the contact id
// in clear never reaches the file, and the processor gets the rewritten
// body; events spooled before the rules (RedactRules changed) are
// rewritten at start and the file compacted.
func TestRedactBeforeSpooling(t *testing.T) {
	dir := t.TempDir()
	// Events spooled without the rules, some of them done (their bodies
	// are then in free pages).
	sp, _ := openTestSpool(t, dir, 1000)
	sent := appendBatch(t, sp, 0, 50)
	if err := sp.markDone(marks(sent[:20])); err != nil {
		t.Fatal(err)
	}
	sp.close()
	if len(grepDir(t, dir, clearContact)) == 0 {
		t.Fatal("the contact id is not in the file to begin with: the test proves nothing")
	}

	o := testOptions(t, dir)
	o.Redact, o.RedactRules = redactContact, "contact_id: hash, key 1"
	p := newRecorder()
	rn := start(t, o, p, nil)
	if code, body, _ := post(t, rn.url, responseBody(100), nil); code != 200 {
		t.Fatalf("post: %d %s", code, body)
	}
	waitFor(t, "31 events processed", func() bool { return len(p.processed()) == 31 })
	for _, ev := range p.processed() {
		if bytes.Contains(ev.Body, []byte(clearContact)) || !bytes.Contains(ev.Body, []byte(hashedContact)) {
			t.Fatalf("the processor got %s", ev.Body)
		}
	}
	if err := rn.stop(); err != nil {
		t.Fatal(err)
	}
	if hits := grepDir(t, dir, clearContact); len(hits) > 0 {
		t.Fatalf("the contact id in clear is still in %v", hits)
	}
}

// With Erased: a webhook about an erased response is acknowledged and not
// spooled; Scrub deletes the waiting events of responses erased since,
// and rewrites the file so that neither they nor the done events of those
// responses (free pages) leave a byte of their id in it.
func TestErasureScrubsTheSpool(t *testing.T) {
	dir := t.TempDir()
	er := &erasedSet{}
	o := testOptions(t, dir)
	o.Erased = er.erased
	p := newRecorder()
	rn := start(t, o, p, nil)
	guid := func(i int) string { return fmt.Sprintf("DA453B67-791E-4D4D-9009-%012X", i) }

	// Response 1 is processed (its event done: its body goes to a free
	// page); then events of responses 2 and 3 wait, failing.
	if code, _, _ := post(t, rn.url, responseBody(1), nil); code != 200 {
		t.Fatal(code)
	}
	waitFor(t, "event 1 processed", func() bool { return len(p.processed()) == 1 })
	waitFor(t, "event 1 marked done", func() bool { return counter(t, rn.reg, "surveysync_webhook_spool_events") == 0 })
	p.setFail(errors.New("sink down"))
	for _, i := range []int{2, 3} {
		if code, _, _ := post(t, rn.url, responseBody(i), nil); code != 200 {
			t.Fatal(code)
		}
	}
	waitFor(t, "2 events waiting", func() bool { return counter(t, rn.reg, "surveysync_webhook_spool_events") == 2 })
	if len(grepDir(t, dir, guid(2))) == 0 {
		t.Fatal("response 2 is not in the spool to begin with: the test proves nothing")
	}

	er.add(survey.GUID(strings.ToLower(guid(1))))
	er.add(survey.GUID(strings.ToLower(guid(2))))
	rn.r.Scrub()
	waitFor(t, "the erased response's event deleted", func() bool { return counter(t, rn.reg, "surveysync_webhook_spool_events") == 1 })
	waitFor(t, "the file rewritten", func() bool {
		return len(grepDir(t, dir, guid(1))) == 0 && len(grepDir(t, dir, guid(2))) == 0
	})
	if len(grepDir(t, dir, guid(3))) == 0 {
		t.Fatal("response 3, not erased, left the spool")
	}
	// A redelivery about an erased response is acknowledged, not spooled.
	if code, body, _ := post(t, rn.url, responseBody(2)+" ", nil); code != 200 || !strings.Contains(body, "duplicate") {
		t.Fatalf("webhook about an erased response: %d %s", code, body)
	}
	if n := counter(t, rn.reg, "surveysync_webhook_spool_events"); n != 1 {
		t.Fatalf("%v events waiting after a webhook about an erased response, want 1", n)
	}
	// The rewritten file takes new events.
	if code, _, _ := post(t, rn.url, responseBody(4), nil); code != 200 {
		t.Fatal(code)
	}
	waitFor(t, "2 events waiting", func() bool { return counter(t, rn.reg, "surveysync_webhook_spool_events") == 2 })
	if err := rn.stop(); err != nil {
		t.Fatal(err)
	}
	// Erased while the receiver was stopped: the next start deletes it.
	er.add(survey.GUID(strings.ToLower(guid(3))))
	p.setFail(nil)
	rn = start(t, o, p, nil)
	waitFor(t, "the spool empty", func() bool { return counter(t, rn.reg, "surveysync_webhook_spool_events") == 0 })
	if hits := grepDir(t, dir, guid(3)); len(hits) > 0 {
		t.Fatalf("response 3, erased while stopped, still in %v", hits)
	}
	waitFor(t, "response 4 processed after the restart", func() bool {
		for _, ev := range p.processed() {
			if bytes.Contains(ev.Body, []byte(guid(4))) {
				return true
			}
		}
		return false
	})
}

// RewriteSpool (surveysync privacy apply) rewrites the waiting bodies,
// records the rules (a receiver started under them rewrites nothing) and
// rewrites the file without the free pages that keep the former bodies.
func TestRewriteSpool(t *testing.T) {
	dir := t.TempDir()
	if n, err := RewriteSpool(dir, redactContact, "r1", nil); n != 0 || err != nil {
		t.Fatalf("no spool: %d %v", n, err)
	}
	sp, _ := openTestSpool(t, dir, 1000)
	sent := appendBatch(t, sp, 0, 40)
	if err := sp.markDone(marks(sent[:10])); err != nil {
		t.Fatal(err)
	}
	sp.close()
	n, err := RewriteSpool(dir, redactContact, "r1", nil)
	if err != nil || n != 30 {
		t.Fatalf("rewrote %d bodies (%v), want the 30 waiting", n, err)
	}
	if hits := grepDir(t, dir, clearContact); len(hits) > 0 {
		t.Fatalf("the contact id in clear is still in %v", hits)
	}
	sp, evs := openTestSpool(t, dir, 1000)
	if len(evs) != 30 || !bytes.Contains(evs[0].Body, []byte(hashedContact)) {
		t.Fatalf("%d events, first body %s", len(evs), evs[0].Body)
	}
	if n, err := sp.redactBodies(func([]byte) []byte { panic("rewritten again") }, "r1", false); n != 0 || err != nil {
		t.Fatalf("under the recorded rules: %d %v", n, err)
	}
	sp.close()
}
