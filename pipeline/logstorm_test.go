package pipeline

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/surveysync/surveysync/survey"
)

// A revoked token fails every queued fetch at once: one warning with a
// count per back-off step, not one per response (issue 19).
func TestRevokedTokenLogsOncePerStep(t *testing.T) {
	f := &fakeFetcher{fail: map[survey.GUID]error{}}
	for i := range 1500 {
		f.fail[id(i)] = fmt.Errorf("get_response survey 1 response %s: 401 Invalid API token (request %d)", id(i), i)
	}
	var mu sync.Mutex
	var out strings.Builder
	log := slog.New(slog.NewTextHandler(lockedWriter{&mu, &out}, nil))
	p := New(Options{FetchConcurrency: 16, Logger: log}, f, &memSink{rows: map[string]uint8{}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error)
	go func() { done <- p.Run(ctx) }()
	var wg sync.WaitGroup
	wg.Add(1500)
	for i := range 1500 {
		if err := p.Submit(ctx, Ref{SurveyID: 1, ResponseID: id(i), Source: "poll", Done: func(error) { wg.Done() }}); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	p.CloseInput()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(out.String(), "fetch response failed"); n > 3 {
		t.Fatalf("%d warnings for 1,500 failed fetches of one cause:\n%s", n, out.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}
