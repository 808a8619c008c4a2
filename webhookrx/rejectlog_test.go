package webhookrx

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/surveysync/surveysync/internal/permanent"
)

// syncBuffer is a strings.Builder safe for the logger's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// 1,000 events rejected for one cause (webhooks naming responses that do
// not exist) make one warning per back-off step with a count, not one per
// event; each event still has its log row with its own error.
func TestRejectionsLogOneLinePerCause(t *testing.T) {
	var out syncBuffer
	o := testOptions(t, "")
	o.Logger = slog.New(slog.NewTextHandler(&out, nil))
	p := ProcessorFunc(func(_ context.Context, ev Event) error {
		return permanent.New("webhook", fmt.Errorf("response %s of survey %d: not listed by the service", ev.Parsed.ResponseID, ev.Parsed.SurveyID))
	})
	log := &memLog{}
	rx := start(t, o, p, log)
	for i := range 1000 {
		if code, body, _ := post(t, rx.url, responseBody(i), nil); code != 200 {
			t.Fatalf("post %d: %d %s", i, code, body)
		}
	}
	waitFor(t, "1,000 rejected events logged", func() bool { return len(log.all()) == 1000 })
	for _, e := range log.all() {
		if e.Outcome != OutcomeRejected || !strings.Contains(e.Error, string(e.ResponseID)) {
			t.Fatalf("logged %+v", e)
		}
	}
	n := strings.Count(out.String(), "webhook event rejected by the processor")
	if n == 0 || n > 10 {
		t.Fatalf("%d warnings for 1,000 rejections of one cause:\n%s", n, out.String())
	}
	t.Logf("%d warnings for 1,000 rejections of one cause", n)
}
