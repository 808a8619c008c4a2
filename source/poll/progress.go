package poll

import (
	"context"
	"fmt"
	"time"
)

// logProgress logs, every ProgressInterval while cycles have been running
// longer than that (a backfill), how far they are: responses written of
// those listed, the rate, and an estimate of the time left.
func (p *Poller) logProgress(ctx context.Context) {
	for {
		select {
		case <-p.o.After(p.o.ProgressInterval):
		case <-ctx.Done():
			return
		}
		now := p.o.Now()
		var listed, done int64
		var oldest time.Time
		streams := 0
		p.progMu.Lock()
		for _, pr := range p.inflight {
			if now.Sub(pr.start) < p.o.ProgressInterval {
				continue
			}
			streams++
			listed += pr.listed.Load()
			done += pr.done.Load()
			if oldest.IsZero() || pr.start.Before(oldest) {
				oldest = pr.start
			}
		}
		p.progMu.Unlock()
		if streams == 0 || listed == 0 {
			continue
		}
		rate, eta := Rate(done, listed, now.Sub(oldest))
		attrs := []any{"done", done, "listed", listed, "percent", done * 100 / listed,
			"per_second", fmt.Sprintf("%.1f", rate), "streams", streams}
		if eta > 0 {
			attrs = append(attrs, "eta", eta.String())
		}
		p.o.Logger.Info("sync progress", attrs...)
	}
}

// Rate is the pace of a cycle that wrote done of listed responses in
// elapsed, per second, and the time left at that pace (0 when unknown).
func Rate(done, listed int64, elapsed time.Duration) (float64, time.Duration) {
	if elapsed <= 0 || done <= 0 {
		return 0, 0
	}
	rate := float64(done) / elapsed.Seconds()
	left := listed - done
	if left <= 0 {
		return rate, 0
	}
	return rate, (time.Duration(float64(left)/rate) * time.Second).Truncate(time.Second)
}
