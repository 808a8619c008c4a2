// Package logonce keeps a repeated cause from writing one log line per
// item: the first occurrence of a cause is logged, the following ones are
// counted, and the count is logged once per back-off step (1 s, doubling up
// to a maximum) while the cause keeps occurring (issue 19: a revoked token
// made ~1,500 identical warnings in a second, one per queued response).
package logonce

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// Limiter groups log lines by cause. The zero value is not usable; use New.
type Limiter struct {
	log      *slog.Logger
	now      func() time.Time
	first    time.Duration
	max      time.Duration
	mu       sync.Mutex
	causes   map[string]*cause
	maxCause int
}

type cause struct {
	step       time.Duration // the current back-off step
	next       time.Time     // when the count is logged next
	suppressed int           // occurrences not logged since the last line
	last       time.Time     // last occurrence
}

// New returns a limiter logging to log, with steps from first doubling up
// to max. now may be nil (time.Now).
func New(log *slog.Logger, first, max time.Duration, now func() time.Time) *Limiter {
	if now == nil {
		now = time.Now
	}
	return &Limiter{log: log, now: now, first: first, max: max, causes: map[string]*cause{}, maxCause: 256}
}

// Warn logs msg with attrs and err unless a line of the same cause (msg
// and the error's text with ids and numbers masked) was logged within the
// current back-off step; then it only counts. A logged line carries
// "repeated" (occurrences since the previous line of the cause, counting
// this one) once the cause repeats. A cause quiet for a whole step starts
// again at the first step (its line still counts what the last step
// suppressed).
func (l *Limiter) Warn(msg string, err error, attrs ...any) {
	l.Log(slog.LevelWarn, msg, err, append(attrs, "err", err)...)
}

// Log is Warn at level, with the cause (why) given apart from the line's
// attributes: the line has attrs only (the caller puts the error among
// them as it names it).
func (l *Limiter) Log(level slog.Level, msg string, why error, attrs ...any) {
	key := msg
	if why != nil {
		key += "\x00" + Mask(why.Error())
	}
	now := l.now()
	l.mu.Lock()
	c, ok := l.causes[key]
	if !ok || now.Sub(c.last) > c.step {
		// New, or quiet for a whole step: a new episode.
		carried := 0
		if ok {
			carried = c.suppressed
		}
		if !ok && len(l.causes) >= l.maxCause {
			clear(l.causes)
		}
		c = &cause{step: l.first, next: now.Add(l.first), last: now}
		l.causes[key] = c
		l.mu.Unlock()
		if carried > 0 {
			attrs = append(attrs, "repeated", carried+1)
		}
		l.log.Log(context.Background(), level, msg, attrs...)
		return
	}
	c.last = now
	c.suppressed++
	if now.Before(c.next) {
		l.mu.Unlock()
		return
	}
	n := c.suppressed
	c.suppressed = 0
	c.step = min(2*c.step, l.max)
	c.next = now.Add(c.step)
	step := c.step
	l.mu.Unlock()
	l.log.Log(context.Background(), level, msg, append(attrs, "repeated", n, "next_line_in", step.String())...)
}

// Mask replaces what varies between occurrences of one cause — numbers,
// hexadecimal ids, GUIDs — by '#'.
func Mask(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	run := 0 // length of the current run of id characters
	flush := func(start int) {
		seg := s[start : start+run]
		if hasDigit(seg) || run >= 8 {
			b.WriteByte('#')
		} else {
			b.WriteString(seg)
		}
		run = 0
	}
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if ch >= '0' && ch <= '9' || ch >= 'a' && ch <= 'f' || ch >= 'A' && ch <= 'F' || ch == '-' && run > 0 {
			run++
			continue
		}
		if run > 0 {
			flush(i - run)
		}
		b.WriteByte(ch)
	}
	if run > 0 {
		flush(len(s) - run)
	}
	return b.String()
}

func hasDigit(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= '0' && s[i] <= '9' {
			return true
		}
	}
	return false
}
