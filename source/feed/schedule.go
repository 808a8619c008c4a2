package feed

import (
	"fmt"
	"time"
)

// next returns when a send triggered at now should go out: nil means at
// once (no scheduled_date). All arithmetic on wall clocks happens in the
// window's time zone, so a window keeps its local hours across daylight
// saving changes (09:00 Europe/Prague is 08:00 UTC in winter, 07:00 UTC in
// summer).
func (s Schedule) next(now time.Time) (*time.Time, error) {
	switch s.Policy {
	case "", PolicyImmediate:
		return nil, nil
	case PolicyDelay:
		if s.Delay <= 0 {
			return nil, fmt.Errorf("delay policy needs a positive delay")
		}
		t := now.Add(s.Delay).UTC()
		return &t, nil
	case PolicyWindow:
		return s.Window.nextOpening(now)
	default:
		return nil, fmt.Errorf("policy %q: want immediate, delay or window", s.Policy)
	}
}

// nextOpening returns nil when now is inside the window, otherwise the next
// time the window opens.
func (w Window) nextOpening(now time.Time) (*time.Time, error) {
	loc := time.UTC
	if w.TimeZone != "" {
		l, err := time.LoadLocation(w.TimeZone)
		if err != nil {
			return nil, fmt.Errorf("window time zone %q: %w", w.TimeZone, err)
		}
		loc = l
	}
	fh, fm, err := parseClock(w.From)
	if err != nil {
		return nil, fmt.Errorf("window from: %w", err)
	}
	th, tm, err := parseClock(w.To)
	if err != nil {
		return nil, fmt.Errorf("window to: %w", err)
	}
	if th*60+tm <= fh*60+fm {
		return nil, fmt.Errorf("window %s–%s: from must be before to (windows across midnight are not supported)", w.From, w.To)
	}
	days := map[time.Weekday]bool{}
	for _, d := range w.Days {
		if d < time.Sunday || d > time.Saturday {
			return nil, fmt.Errorf("window day %d out of range", d)
		}
		days[d] = true
	}
	local := now.In(loc)
	for i := 0; i <= 7; i++ {
		// Calendar day i days from today, built from the date (not by adding
		// 24h, which is wrong on a 23- or 25-hour day).
		y, m, d := local.Date()
		day := time.Date(y, m, d+i, 12, 0, 0, 0, loc)
		if len(days) > 0 && !days[day.Weekday()] {
			continue
		}
		open := time.Date(day.Year(), day.Month(), day.Day(), fh, fm, 0, 0, loc)
		closing := time.Date(day.Year(), day.Month(), day.Day(), th, tm, 0, 0, loc)
		if i == 0 && !now.Before(open) && now.Before(closing) {
			return nil, nil
		}
		if open.After(now) {
			t := open.UTC()
			return &t, nil
		}
	}
	return nil, fmt.Errorf("window has no day")
}

func parseClock(s string) (int, int, error) {
	t, err := time.Parse("15:04", s)
	if err != nil {
		return 0, 0, fmt.Errorf("%q: want HH:MM", s)
	}
	return t.Hour(), t.Minute(), nil
}
