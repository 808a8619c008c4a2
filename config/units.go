package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// ByteSize is a number of bytes, written in the configuration as an integer
// or with a unit: "16MiB", "1GiB", "512KiB" (powers of 1024), "100MB",
// "1.5GB" (powers of 1000), "4096" or "4096B" (bytes).
type ByteSize int64

var byteUnits = []struct {
	name string
	mult float64
}{
	// Longest first, so that "MiB" is not read as "B".
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12},
	{"b", 1},
}

// ParseByteSize reads a byte size such as "64MiB" (see ByteSize).
func ParseByteSize(s string) (ByteSize, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, fmt.Errorf("empty byte size")
	}
	lower := strings.ToLower(t)
	mult := 1.0
	for _, u := range byteUnits {
		if strings.HasSuffix(lower, u.name) {
			mult = u.mult
			lower = strings.TrimSpace(strings.TrimSuffix(lower, u.name))
			break
		}
	}
	n, err := strconv.ParseFloat(lower, 64)
	if err != nil || n < 0 || math.IsInf(n, 0) || math.IsNaN(n) {
		return 0, fmt.Errorf("invalid byte size %q (want e.g. \"16MiB\", \"1GiB\", \"500KB\" or a number of bytes)", s)
	}
	v := n * mult
	if v > math.MaxInt64 {
		return 0, fmt.Errorf("byte size %q is too large", s)
	}
	return ByteSize(math.Round(v)), nil
}

// String writes the size with the largest binary unit that divides it
// exactly: 67108864 → "64MiB", 1500 → "1500B".
func (b ByteSize) String() string {
	if b == 0 {
		return "0"
	}
	for _, u := range []struct {
		name string
		mult int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if int64(b)%u.mult == 0 {
			return strconv.FormatInt(int64(b)/u.mult, 10) + u.name
		}
	}
	return strconv.FormatInt(int64(b), 10) + "B"
}

// MarshalText writes the size as String does.
func (b ByteSize) MarshalText() ([]byte, error) { return []byte(b.String()), nil }

// UnmarshalText reads a size as ParseByteSize does.
func (b *ByteSize) UnmarshalText(t []byte) error {
	v, err := ParseByteSize(string(t))
	if err != nil {
		return err
	}
	*b = v
	return nil
}

// FormatDuration writes d the way an operator would: "30s", "10m", "72h",
// "1h30m", "250ms" (time.Duration.String writes "10m0s").
func FormatDuration(d time.Duration) string {
	if d == 0 {
		return "0s"
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// parseDuration is time.ParseDuration with an error that shows the accepted
// forms.
func parseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q (want a Go duration such as \"30s\", \"5m\", \"72h\" or \"1h30m\")", s)
	}
	return d, nil
}

// dateLayout is the layout of a date-only value (sync.backfill_from).
const dateLayout = "2006-01-02"

// parseDate reads "2006-01-02" (midnight UTC) or an RFC 3339 time.
func parseDate(s string) (time.Time, error) {
	t := strings.TrimSpace(s)
	if d, err := time.Parse(dateLayout, t); err == nil {
		return d.UTC(), nil
	}
	if d, err := time.Parse(time.RFC3339Nano, t); err == nil {
		return d.UTC(), nil
	}
	return time.Time{}, fmt.Errorf("invalid date %q (want \"2006-01-02\" or an RFC 3339 time such as \"2024-05-01T08:00:00Z\")", s)
}

// formatDate writes a date-only value when t is midnight UTC, RFC 3339
// otherwise.
func formatDate(t time.Time) string {
	t = t.UTC()
	if t.Hour() == 0 && t.Minute() == 0 && t.Second() == 0 && t.Nanosecond() == 0 {
		return t.Format(dateLayout)
	}
	return t.Format(time.RFC3339Nano)
}

// ParseClock reads a time of day "HH:MM" (00:00 to 24:00) as the duration
// since midnight. feeds[].send.schedule.window.from/to use it.
func ParseClock(s string) (time.Duration, error) {
	h, m, ok := strings.Cut(strings.TrimSpace(s), ":")
	hh, err1 := strconv.Atoi(h)
	mm, err2 := strconv.Atoi(m)
	if !ok || len(h) != 2 || len(m) != 2 || err1 != nil || err2 != nil ||
		hh < 0 || hh > 24 || mm < 0 || mm > 59 || (hh == 24 && mm != 0) {
		return 0, fmt.Errorf("invalid time of day %q (want \"HH:MM\", e.g. \"09:00\")", s)
	}
	return time.Duration(hh)*time.Hour + time.Duration(mm)*time.Minute, nil
}

// Weekdays are the names feeds[].send.schedule.window.days accepts.
var weekdays = map[string]time.Weekday{
	"mon": time.Monday, "tue": time.Tuesday, "wed": time.Wednesday, "thu": time.Thursday,
	"fri": time.Friday, "sat": time.Saturday, "sun": time.Sunday,
}

// ParseWeekday reads a day name of a send window: mon, tue, wed, thu, fri,
// sat, sun (case-insensitive; full English names are accepted too).
func ParseWeekday(s string) (time.Weekday, error) {
	n := strings.ToLower(strings.TrimSpace(s))
	if len(n) > 3 {
		for name, d := range weekdays {
			if strings.EqualFold(n, d.String()) {
				return weekdays[name], nil
			}
		}
	}
	if d, ok := weekdays[n]; ok {
		return d, nil
	}
	return 0, fmt.Errorf("invalid day %q (want one of mon, tue, wed, thu, fri, sat, sun)", s)
}
