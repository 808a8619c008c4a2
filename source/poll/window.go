package poll

import (
	"context"
	"fmt"
	"time"

	"github.com/surveysync/surveysync/pipeline"
	"github.com/surveysync/surveysync/survey"
)

func (p *Poller) query(stream string, from, to time.Time, page int) survey.ListQuery {
	q := survey.ListQuery{Page: page, PerPage: p.o.PerPage, Status: stream}
	// Whether the service's bounds are inclusive is not documented: start
	// one second early so adjacent windows overlap instead of leaving a gap.
	from = from.Add(-time.Second)
	if stream == pipeline.StreamPartial {
		q.StartStartedAt, q.EndStartedAt = from, to
	} else {
		q.StartCompletedAt, q.EndCompletedAt = from, to
	}
	return q
}

func (p *Poller) list(ctx context.Context, c *pass, from, to time.Time, page int) (*survey.ResponseList, error) {
	c.calls.Add(1)
	l, err := p.lister.ListResponses(ctx, c.survey, p.query(c.stream, from, to, page))
	if err != nil {
		return nil, fmt.Errorf("list %s responses of survey %d from %s to %s page %d: %w",
			c.stream, c.survey, survey.FormatTime(from), survey.FormatTime(to), page, err)
	}
	if l.Total < 0 {
		l.Total = 0
	}
	return l, nil
}

// split pages [from, to) as one window, or as two halves when it holds more
// than MaxWindowResponses. first is the window's first page when already
// read. A total is only a claim: when the halves together claim much more
// than the window did, the totals are not believed and the window is paged
// whole, under the page cap (a total of 10^9 must not split a window into
// 10^9 pieces).
func (p *Poller) split(ctx context.Context, c *pass, from, to time.Time, first *survey.ResponseList) error {
	if first == nil {
		var err error
		if first, err = p.list(ctx, c, from, to, 1); err != nil {
			return err
		}
		// The cycle's whole window (halves come with their first page):
		// what its progress counts towards.
		c.listed.Add(int64(first.Total))
	}
	if first.Total > p.o.MaxWindowResponses && to.Sub(from) > 2*time.Second {
		mid := from.Add(to.Sub(from) / 2).Truncate(time.Second)
		left, err := p.list(ctx, c, from, mid, 1)
		if err != nil {
			return err
		}
		right, err := p.list(ctx, c, mid, to, 1)
		if err != nil {
			return err
		}
		if left.Total+right.Total <= first.Total+first.Total/2+p.o.PerPage {
			if err := p.split(ctx, c, from, mid, left); err != nil {
				return err
			}
			return p.split(ctx, c, mid, to, right)
		}
		p.anomaly(c, anImplausibleTotal)
		p.o.Logger.Debug("list totals are implausible (the halves of a window claim more than the window); paging the window whole, under the page cap",
			"survey_id", c.survey, "stream", c.stream, "total", first.Total, "left", left.Total, "right", right.Total)
	}
	return p.page(ctx, c, from, to, first)
}

// maxPages is the page cap of one pass over a window claiming total.
func (p *Poller) maxPages(total, absolute int) int {
	n := total/p.o.PerPage + 1
	return min(n+n/10+2, absolute)
}

// page submits every response of one window. If the window's total changes
// while it is paged, items may have shifted between pages: it is paged again
// (a response submitted twice is written idempotently). A pass stops at a
// short page, at the page its total says is the last, or at a page that
// adds no id new to the pass (a service repeating a page); a pass longer
// than its cap fails the window.
func (p *Poller) page(ctx context.Context, c *pass, from, to time.Time, first *survey.ResponseList) error {
	w := c.tr.open(from, to)
	defer c.tr.sealed(w)
	// Never sized by the total: it is only the service's claim.
	// Keyed by 16 bytes, not the id's string: a window of 50,000 ids
	// kept each list page's strings alive (issue 19's heap profile).
	seen := make(map[heldKey]int8, min(first.Total, 4*p.o.PerPage))
	cur := first
	for attempt := int8(1); ; attempt++ {
		total := cur.Total
		last, err := p.pagePass(ctx, c, w, cur, attempt, seen)
		if err != nil {
			return err
		}
		if last.Total == total {
			return nil
		}
		if attempt >= 3 {
			// Still moving after three passes: a response may have
			// landed on a page already read. The window is not
			// acknowledged, so the watermark stays before it and the
			// next cycle reads it again (the re-reads are idempotent).
			p.anomaly(c, anTotalUnstable)
			err := fmt.Errorf("list %s responses of survey %d from %s to %s: total changed during each of %d passes (last %d, then %d): window read again next cycle",
				c.stream, c.survey, survey.FormatTime(from), survey.FormatTime(to), attempt, total, last.Total)
			p.failWindow(c.tr, w, err)
			return err
		}
		p.m.reread.WithLabelValues(c.stream).Inc()
		p.o.Logger.Info("window changed while paged; paging it again", "survey_id", c.survey, "stream", c.stream,
			"total_before", total, "total_after", last.Total)
		if cur, err = p.list(ctx, c, from, to, 1); err != nil {
			p.failWindow(c.tr, w, err)
			return err
		}
	}
}

// pagePass is one pass over window w from its first page first: it
// submits every id not seen in this pass (seen maps an id to the last
// pass that saw it) and returns the pass's last page. A failed list call
// or a pass beyond the page cap fails the window.
func (p *Poller) pagePass(ctx context.Context, c *pass, w *window, first *survey.ResponseList, attempt int8, seen map[heldKey]int8) (*survey.ResponseList, error) {
	from, to := w.from, w.to
	limit := p.maxPages(first.Total, p.o.MaxWindowPages)
	cur := first
	for page := 1; ; page++ {
		if page > 1 {
			var err error
			if cur, err = p.list(ctx, c, from, to, page); err != nil {
				p.failWindow(c.tr, w, err)
				return nil, err
			}
		}
		p.m.pages.WithLabelValues(c.stream).Inc()
		added, err := p.submitPage(ctx, c, w, cur, attempt, seen)
		if err != nil {
			return nil, err
		}
		p.m.listed.WithLabelValues(c.stream).Add(float64(len(cur.Data)))
		if len(cur.Data) < p.o.PerPage || page*p.o.PerPage >= cur.Total {
			return cur, nil
		}
		if added == 0 {
			p.anomaly(c, anPageAddsNothing)
			p.o.Logger.Debug("a list page repeated ids already read in this pass; paging stops", "survey_id", c.survey,
				"stream", c.stream, "page", page, "total", cur.Total)
			return cur, nil
		}
		if page >= limit {
			p.anomaly(c, anPageCap)
			err := fmt.Errorf("list %s responses of survey %d from %s to %s: still more pages after %d (total claims %d): page cap reached",
				c.stream, c.survey, survey.FormatTime(from), survey.FormatTime(to), page, cur.Total)
			p.failWindow(c.tr, w, err)
			return nil, err
		}
	}
}

// submitPage considers every id of a page not yet seen in this pass (an id
// submitted in an earlier pass is not submitted again) and returns how many
// were new to the pass.
func (p *Poller) submitPage(ctx context.Context, c *pass, w *window, l *survey.ResponseList, attempt int8, seen map[heldKey]int8) (added int, err error) {
	for _, it := range l.Data {
		k := keyOf(c.survey, it.ResponseID)
		prev, dup := seen[k]
		if prev == attempt {
			continue
		}
		seen[k] = attempt
		added++
		if dup {
			continue // submitted in an earlier pass
		}
		if err := p.consider(ctx, c, w, it.ResponseID); err != nil {
			return added, err
		}
	}
	return added, nil
}

// consider submits a listed response unless it is held at the listed
// status: a completed, disqualified or quota-full response cannot change
// but by deletion (which reconcile finds), and a partial one is re-read
// only by the partial stream's rescans. A resync submits every one.
func (p *Poller) consider(ctx context.Context, c *pass, w *window, id survey.GUID) error {
	if c.resync {
		c.found.Add(1)
		return p.submit(ctx, c.tr, w, c.survey, id, "resync", c.stream, func() { c.synced.Add(1); c.done.Add(1) })
	}
	h := p.held.get(c.survey, id)
	same := sameStatus(c.stream, h)
	if same && !(c.rescan && h&^hsRejected == hsPartial) {
		p.m.skipped.WithLabelValues(c.stream).Inc()
		c.done.Add(1)
		return nil
	}
	if !same {
		c.found.Add(1)
	}
	return p.submit(ctx, c.tr, w, c.survey, id, "poll", c.stream, func() { c.synced.Add(1); c.done.Add(1) })
}

func (p *Poller) failWindow(tr *tracker, w *window, err error) {
	tr.mu.Lock()
	if w.failed == nil {
		w.failed = err
	}
	tr.mu.Unlock()
}

// submit hands a ref to the pipeline; once it is written, the response is
// held at status (when not empty).
func (p *Poller) submit(ctx context.Context, tr *tracker, w *window, surveyID int64, id survey.GUID, source, status string, count func()) error {
	tr.mu.Lock()
	w.pending++
	tr.mu.Unlock()
	rejected := false
	err := p.sub.Submit(ctx, pipeline.Ref{
		SurveyID: surveyID, ResponseID: id, Source: source, SkipUnchanged: tr.skipUnchanged, ListedStatus: status,
		OnReject: func() { rejected = true },
		Done: func(err error) {
			if err == nil {
				count()
				switch {
				case status == "":
				case rejected:
					p.held.putRejected(surveyID, id, status)
				default:
					p.held.put(surveyID, id, status)
				}
			}
			tr.ack(w, err)
		},
	})
	if err != nil {
		tr.ack(w, err)
		return err
	}
	return nil
}
