package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/surveysync/surveysync/pipeline"
)

// surveyBook owns the surveys table: names and last-seen times learned from
// synced responses (saved in the background), launch and end times learned
// from webhooks (saved at once). One owner, so no writer overwrites another's
// fields with a stale copy.
type surveyBook struct {
	store pipeline.SurveyStore
	now   func() time.Time
	log   *slog.Logger

	mu    sync.Mutex
	known map[int64]pipeline.SurveyInfo
	dirty map[int64]bool
}

func newSurveyBook(ctx context.Context, st pipeline.SurveyStore, log *slog.Logger) (*surveyBook, error) {
	b := &surveyBook{store: st, now: time.Now, log: log, known: map[int64]pipeline.SurveyInfo{}, dirty: map[int64]bool{}}
	rows, err := st.LoadSurveys(ctx)
	if err != nil {
		return nil, fmt.Errorf("load surveys: %w", err)
	}
	for _, s := range rows {
		b.known[s.SurveyID] = s
	}
	return b, nil
}

// has reports whether the surveys table knows the survey (synced, or
// launched by a webhook).
func (b *surveyBook) has(id int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.known[id]
	return ok
}

// active lists the surveys that have not ended.
func (b *surveyBook) active() []int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []int64
	for id, s := range b.known {
		if s.EndedAt == nil {
			out = append(out, id)
		}
	}
	return out
}

// ended lists the surveys that have ended (polled rarely).
func (b *surveyBook) ended() []int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []int64
	for id, s := range b.known {
		if s.EndedAt != nil {
			out = append(out, id)
		}
	}
	return out
}

func (b *surveyBook) touch(id int64, change func(*pipeline.SurveyInfo)) pipeline.SurveyInfo {
	now := b.now()
	s, ok := b.known[id]
	if !ok {
		s = pipeline.SurveyInfo{SurveyID: id, FirstSeen: now}
	}
	s.LastSeen = now
	change(&s)
	b.known[id] = s
	return s
}

// seen notes a synced response's survey and name; it never blocks on I/O.
func (b *surveyBook) seen(id int64, name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s, ok := b.known[id]; ok && s.Name == name && b.now().Sub(s.LastSeen) < time.Minute {
		return
	}
	b.touch(id, func(s *pipeline.SurveyInfo) {
		if name != "" {
			s.Name = name
		}
	})
	b.dirty[id] = true
}

// update changes a survey and saves it before returning (webhook events).
func (b *surveyBook) update(ctx context.Context, id int64, change func(*pipeline.SurveyInfo)) error {
	b.mu.Lock()
	s := b.touch(id, change)
	delete(b.dirty, id)
	b.mu.Unlock()
	if err := b.store.SaveSurveys(ctx, []pipeline.SurveyInfo{s}); err != nil {
		b.mu.Lock()
		b.dirty[id] = true
		b.mu.Unlock()
		return fmt.Errorf("save survey %d: %w", id, err)
	}
	return nil
}

func (b *surveyBook) flush(ctx context.Context) error {
	b.mu.Lock()
	var rows []pipeline.SurveyInfo
	for id := range b.dirty {
		rows = append(rows, b.known[id])
	}
	clear(b.dirty)
	b.mu.Unlock()
	if len(rows) == 0 {
		return nil
	}
	if err := b.store.SaveSurveys(ctx, rows); err != nil {
		b.mu.Lock()
		for _, s := range rows {
			b.dirty[s.SurveyID] = true
		}
		b.mu.Unlock()
		return err
	}
	return nil
}

// run saves what seen learned every interval, and once more at the end.
func (b *surveyBook) run(ctx context.Context, every time.Duration) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			if err := b.flush(ctx); err != nil && ctx.Err() == nil {
				b.log.Warn("save surveys failed; retried", "err", err)
			}
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			if err := b.flush(fctx); err != nil {
				b.log.Warn("save surveys at stop failed", "err", err)
			}
			return nil
		}
	}
}
