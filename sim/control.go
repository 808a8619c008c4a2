package sim

import (
	"cmp"
	"fmt"
	"iter"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/surveysync/surveysync/survey"
)

// The truth and the control API in Go. Every method is also reachable over
// HTTP under /_sim/ (control_http.go).

// Responses yields the current detail of every response of a survey that
// exists at Now, deleted ones included (status "deleted"), purged ones not:
// generated responses in index order (date_created order), then added ones
// in the order they were added. Each value is a deep copy. The iterator
// takes the lock per response, so the consumer may call the Sim.
func (s *Sim) Responses(surveyID int64) iter.Seq[survey.Response] {
	return func(yield func(survey.Response) bool) {
		s.mu.RLock()
		sv, ok := s.survey(surveyID)
		s.mu.RUnlock()
		if !ok {
			return
		}
		now := s.nowNS()
		g := sv.gen
		for i := 0; i < g.n; i++ {
			if g.start+int64(i)*g.interval > now {
				break
			}
			s.mu.RLock()
			var r survey.Response
			found := false
			if slot, over := sv.baseOver[int32(i)]; over {
				if e := sv.extras[slot]; !e.purged {
					r, found = deepCopy(e.resp), true
				}
			} else if h := g.header(i); sv.exists(&h, now) {
				r, found = deepCopy(g.build(i, h, now)), true
			}
			s.mu.RUnlock()
			if found && !yield(r) {
				return
			}
		}
		for k := 0; ; k++ {
			s.mu.RLock()
			if k >= len(sv.extras) {
				s.mu.RUnlock()
				return
			}
			e := sv.extras[k]
			var r survey.Response
			found := e.base < 0 && !e.purged && e.resp.DateCreated.UnixNano() <= now
			if found {
				r = deepCopy(e.resp)
			}
			s.mu.RUnlock()
			if found && !yield(r) {
				return
			}
		}
	}
}

// Response returns the current detail of a response as GET would (without
// faults), and false when it does not exist or was purged.
func (s *Sim) Response(surveyID int64, id survey.GUID) (survey.Response, bool) {
	g, ok := parseGUID16(string(id))
	if !ok {
		return survey.Response{}, false
	}
	now := s.nowNS()
	s.mu.RLock()
	defer s.mu.RUnlock()
	sv, ok := s.survey(surveyID)
	if !ok {
		return survey.Response{}, false
	}
	r, ok := sv.current(g, now)
	if !ok {
		return survey.Response{}, false
	}
	return deepCopy(r), true
}

func isFinal(status string) bool {
	switch status {
	case survey.StatusCompleted, survey.StatusDisqualified, survey.StatusQuotaFull:
		return true
	}
	return false
}

// sec100ns truncates to the service's finest precision (7 digits).
func sec100ns(t time.Time) time.Time { return t.UTC().Truncate(100 * time.Nanosecond) }

// normalize completes r the way the service would have recorded it.
func (s *Sim) normalize(sv *survState, r *survey.Response, id guid16, now time.Time) error {
	sanitize(r)
	r.ResponseID = survey.GUID(id.String())
	r.SurveyID = sv.gen.id
	if r.SurveyName == "" {
		r.SurveyName = sv.gen.name
	}
	if r.ResponseStatus == "" {
		r.ResponseStatus = survey.StatusCompleted
	}
	if statusCode(r.ResponseStatus) == stNone {
		return fmt.Errorf("sim: response status %q: want partial, completed, disqualified, quotafull or deleted", r.ResponseStatus)
	}
	if r.DateCreated.IsZero() {
		r.DateCreated.Time = now
		if isFinal(r.ResponseStatus) && r.DateCompleted != nil && r.DateCompleted.Before(now) {
			r.DateCreated.Time = r.DateCompleted.Add(-5 * time.Minute)
		}
	}
	r.DateCreated.Time = sec100ns(r.DateCreated.Time)
	switch {
	case isFinal(r.ResponseStatus):
		if r.DateCompleted == nil {
			t := now
			if t.Before(r.DateCreated.Time) {
				t = r.DateCreated.Time
			}
			r.DateCompleted = &survey.Time{Time: t}
		}
		r.DateCompleted = &survey.Time{Time: sec100ns(r.DateCompleted.Time)}
		if r.TotalTime == nil {
			r.TotalTime = survey.Int(int64(r.DateCompleted.Sub(r.DateCreated.Time) / time.Second))
		}
	case r.ResponseStatus == survey.StatusPartial:
		r.DateCompleted, r.TotalTime = nil, nil
	}
	if r.DistributionID == nil {
		r.DistributionID = ptr(sv.gen.distributionID(distLink))
	}
	if r.IPAddress == "" {
		r.IPAddress = ipAddress(sv.gen.key^0xadd, int(id[15]))
	}
	if r.URLParameters == nil || r.Pages == nil {
		answered := len(sv.gen.q.pages)
		if r.ResponseStatus == survey.StatusPartial {
			answered = 1
		}
		params, pages := sv.gen.q.answer(mix64(uint64(id[0])<<56|uint64(id[15])^sv.gen.key), id, answered, sv.gen.files)
		if r.URLParameters == nil {
			r.URLParameters = params
		}
		if r.Pages == nil {
			r.Pages = deepCopy(survey.Response{Pages: pages}).Pages
		}
	}
	return nil
}

// AddResponse adds a response to a survey, as if a respondent had just
// filled it in, and sends response_received when its status is final.
// Missing fields are filled: a new id, date_created (Now), status
// completed, date_completed (Now) and total_time, the link distribution,
// and pages answered from the survey's questionnaire. The stored response
// is returned.
func (s *Sim) AddResponse(surveyID int64, r survey.Response) (survey.Response, error) {
	r = deepCopy(r)
	now := sec100ns(s.now())
	s.mu.Lock()
	sv, ok := s.survey(surveyID)
	if !ok {
		s.mu.Unlock()
		return survey.Response{}, fmt.Errorf("%w %d", ErrUnknownSurvey, surveyID)
	}
	var id guid16
	if r.ResponseID == "" {
		s.idSeq++
		ir := newRNG(s.key, s.idSeq, 0xadd)
		id = randomGUID(ir.next(), ir.next())
	} else {
		var ok bool
		if id, ok = parseGUID16(string(r.ResponseID)); !ok {
			s.mu.Unlock()
			return survey.Response{}, fmt.Errorf("sim: invalid response id %q", r.ResponseID)
		}
	}
	if _, found := sv.current(id, now.UnixNano()); found {
		s.mu.Unlock()
		return survey.Response{}, fmt.Errorf("%w: %s", ErrExists, id)
	}
	if err := s.normalize(sv, &r, id, now); err != nil {
		s.mu.Unlock()
		return survey.Response{}, err
	}
	base := -1
	if i, isBase := sv.gen.decodeBase(id); isBase {
		base = i
	}
	sv.store(id, r, base, false)
	out := deepCopy(r)
	s.mu.Unlock()
	if isFinal(r.ResponseStatus) {
		s.wh.responseReceived(&r)
	}
	return out, nil
}

// UpdateResponse replaces the detail of an existing response (generated or
// added) by r (r.ResponseID names it; missing fields are filled as by
// AddResponse). It sends response_received when the status becomes final.
func (s *Sim) UpdateResponse(surveyID int64, r survey.Response) (survey.Response, error) {
	r = deepCopy(r)
	id, ok := parseGUID16(string(r.ResponseID))
	if !ok {
		return survey.Response{}, fmt.Errorf("sim: invalid response id %q", r.ResponseID)
	}
	var was string
	out, err := s.modify(surveyID, id, func(sv *survState, cur *survey.Response, now time.Time) error {
		was = cur.ResponseStatus
		if err := s.normalize(sv, &r, id, now); err != nil {
			return err
		}
		*cur = r
		return nil
	})
	if err == nil && !isFinal(was) && isFinal(out.ResponseStatus) {
		s.wh.responseReceived(&out)
	}
	return deepCopy(out), err
}

// CompletePartial completes a partial response now with the given final
// status ("" = completed): date_completed and total_time are set, and a
// generated response gets the answers of all its pages. It sends
// response_received.
func (s *Sim) CompletePartial(surveyID int64, id survey.GUID, status string) (survey.Response, error) {
	if status == "" {
		status = survey.StatusCompleted
	}
	if !isFinal(status) {
		return survey.Response{}, fmt.Errorf("sim: complete with status %q: want completed, disqualified or quotafull", status)
	}
	g, ok := parseGUID16(string(id))
	if !ok {
		return survey.Response{}, fmt.Errorf("sim: invalid response id %q", id)
	}
	out, err := s.modify(surveyID, g, func(sv *survState, cur *survey.Response, now time.Time) error {
		if cur.ResponseStatus != survey.StatusPartial {
			return fmt.Errorf("%w: %s is %s, not partial", ErrState, id, cur.ResponseStatus)
		}
		if i, isBase := sv.gen.decodeBase(g); isBase {
			if _, over := sv.baseOver[int32(i)]; !over {
				h := sv.gen.header(i)
				h.final, h.completed = statusCode(status), now.UnixNano()
				h.totalTime = int32(now.Sub(time.Unix(0, h.created)) / time.Second)
				*cur = deepCopy(sv.gen.build(i, h, now.UnixNano()))
				return nil
			}
		}
		cur.ResponseStatus = status
		cur.DateCompleted = &survey.Time{Time: now}
		cur.TotalTime = survey.Int(int64(now.Sub(cur.DateCreated.Time) / time.Second))
		return nil
	})
	if err == nil {
		s.wh.responseReceived(&out)
	}
	return deepCopy(out), err
}

// DeleteResponse marks a response deleted: its detail then reports status
// "deleted" and it leaves every list.
func (s *Sim) DeleteResponse(surveyID int64, id survey.GUID) error {
	g, ok := parseGUID16(string(id))
	if !ok {
		return fmt.Errorf("sim: invalid response id %q", id)
	}
	_, err := s.modify(surveyID, g, func(_ *survState, cur *survey.Response, _ time.Time) error {
		cur.ResponseStatus = survey.StatusDeleted
		return nil
	})
	return err
}

// PurgeResponse removes a response entirely: its detail then answers 404.
func (s *Sim) PurgeResponse(surveyID int64, id survey.GUID) error {
	g, ok := parseGUID16(string(id))
	if !ok {
		return fmt.Errorf("sim: invalid response id %q", id)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sv, ok := s.survey(surveyID)
	if !ok {
		return fmt.Errorf("%w %d", ErrUnknownSurvey, surveyID)
	}
	cur, ok := sv.current(g, s.nowNS())
	if !ok {
		return fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	base := -1
	if i, isBase := sv.gen.decodeBase(g); isBase {
		base = i
	}
	sv.store(g, deepCopy(cur), base, true)
	return nil
}

// modify applies f to the current detail of an existing response and
// stores the result.
func (s *Sim) modify(surveyID int64, id guid16, f func(*survState, *survey.Response, time.Time) error) (survey.Response, error) {
	now := sec100ns(s.now())
	s.mu.Lock()
	defer s.mu.Unlock()
	sv, ok := s.survey(surveyID)
	if !ok {
		return survey.Response{}, fmt.Errorf("%w %d", ErrUnknownSurvey, surveyID)
	}
	cur, ok := sv.current(id, now.UnixNano())
	if !ok {
		return survey.Response{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	cur = deepCopy(cur)
	if err := f(sv, &cur, now); err != nil {
		return survey.Response{}, err
	}
	base := -1
	if i, isBase := sv.gen.decodeBase(id); isBase {
		base = i
	}
	sv.store(id, cur, base, false)
	return cur, nil
}

// LaunchSurvey starts a survey (creating it, without generated responses,
// when unknown; a name "" keeps the current one) and sends survey_launched.
func (s *Sim) LaunchSurvey(id int64, name string) error {
	now := sec100ns(s.now())
	s.mu.Lock()
	sv, ok := s.survey(id)
	if !ok {
		g, err := newSurveyGen(SurveySpec{ID: id, Name: name, Start: now}, now)
		if err != nil {
			s.mu.Unlock()
			return err
		}
		sv = &survState{gen: g}
		s.surveys[id] = sv
	}
	if name != "" {
		sv.gen.name = name
	}
	sv.launchedAt, sv.endedAt = now, 0
	s.mu.Unlock()
	s.wh.enqueue(survey.EventSurveyLaunched, webhookBody{EventName: survey.EventSurveyLaunched, SurveyID: id, LaunchedAt: fmtTime(now)})
	return nil
}

// EndSurvey ends a survey: generated responses created after now never
// appear. It sends survey_ended.
func (s *Sim) EndSurvey(id int64) error {
	now := sec100ns(s.now())
	s.mu.Lock()
	sv, ok := s.survey(id)
	if !ok {
		s.mu.Unlock()
		return fmt.Errorf("%w %d", ErrUnknownSurvey, id)
	}
	sv.endedAt = now.UnixNano()
	s.mu.Unlock()
	s.wh.enqueue(survey.EventSurveyEnded, webhookBody{EventName: survey.EventSurveyEnded, SurveyID: id, EndedAt: fmtTime(now)})
	return nil
}

// SurveyInfo describes a survey of the emulator.
type SurveyInfo struct {
	ID         int64      `json:"id"`
	Name       string     `json:"name"`
	Generated  int        `json:"generated"` // generated responses (past and future)
	Stored     int        `json:"stored"`    // added or overridden responses
	LaunchedAt time.Time  `json:"launched_at"`
	EndedAt    *time.Time `json:"ended_at,omitempty"`
	Links      [4]int64   `json:"distribution_ids"` // link, email, cati, kiosk
}

// Surveys lists the surveys.
func (s *Sim) Surveys() []SurveyInfo {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]SurveyInfo, 0, len(s.surveys))
	for id, sv := range s.surveys {
		si := SurveyInfo{ID: id, Name: sv.gen.name, Generated: sv.gen.n, Stored: len(sv.extras), LaunchedAt: sv.launchedAt}
		if sv.endedAt != 0 {
			si.EndedAt = ptr(time.Unix(0, sv.endedAt).UTC())
		}
		for k := range si.Links {
			si.Links[k] = sv.gen.distributionID(uint8(k + 1))
		}
		out = append(out, si)
	}
	slices.SortFunc(out, func(a, b SurveyInfo) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// deepCopy copies a response so that no pointer or slice is shared.
func deepCopy(r survey.Response) survey.Response {
	cp := func(p *survey.FlexInt) *survey.FlexInt {
		if p == nil {
			return nil
		}
		v := *p
		return &v
	}
	cs := func(p *string) *string {
		if p == nil {
			return nil
		}
		v := *p
		return &v
	}
	if r.ContactID != nil {
		r.ContactID = ptr(*r.ContactID)
	}
	if r.DistributionID != nil {
		r.DistributionID = ptr(*r.DistributionID)
	}
	if r.DateCompleted != nil {
		r.DateCompleted = ptr(*r.DateCompleted)
	}
	r.TotalTime = cp(r.TotalTime)
	if r.URLParameters != nil {
		r.URLParameters = append([]survey.URLParameter{}, r.URLParameters...)
	}
	if r.Pages != nil {
		pages := make([]survey.Page, len(r.Pages))
		for k, p := range r.Pages {
			pages[k] = p
			if p.Questions == nil {
				continue
			}
			qs := make([]survey.Question, len(p.Questions))
			for j, q := range p.Questions {
				qs[j] = q
				if q.Answers == nil {
					continue
				}
				as := make([]survey.Answer, len(q.Answers))
				for i, a := range q.Answers {
					as[i] = survey.Answer{
						RowID: cp(a.RowID), RowLabel: cs(a.RowLabel), ColumnID: cp(a.ColumnID), ColumnLabel: cs(a.ColumnLabel),
						ChoiceID: cp(a.ChoiceID), ChoiceLabel: cs(a.ChoiceLabel), OtherID: cp(a.OtherID), Text: cs(a.Text), Value: cp(a.Value),
					}
					if a.FileID != nil {
						as[i].FileID = ptr(*a.FileID)
					}
				}
				qs[j].Answers = as
			}
			pages[k].Questions = qs
		}
		r.Pages = pages
	}
	return r
}

// shift emulates a response arriving late before the page a client is
// about to read (fault "shift"): a fresh response whose list time lies
// among the earlier pages of the query, so that the client's next page
// repeats an item and the newcomer is only seen on a re-read.
func (s *Sim) shift(surveyID int64, q *listQuery) {
	now := s.nowNS()
	s.mu.Lock()
	sv, ok := s.survey(surveyID)
	if !ok {
		s.mu.Unlock()
		return
	}
	sv.ensureBuilt()
	ids := sv.list(q, now)
	off, _ := pageBounds(q.page, q.perPage, len(ids))
	if off == 0 {
		s.mu.Unlock()
		return
	}
	s.idSeq++
	r := newRNG(s.key, s.idSeq, 0x5417)
	k := r.intn(off)
	t, g := sv.key(ids[k])
	id := randomGUID(r.next(), r.next())
	if k > 0 {
		if tp, _ := sv.key(ids[k-1]); t-100 >= tp {
			t -= 100 // 100 ns earlier: lands between k-1 and k
		} else {
			k = 0
		}
	}
	if k == 0 {
		id = g // same time, an id sorting just before item k
		for j := 15; j >= 0; j-- {
			if j == 6 || j == 8 {
				continue
			}
			if id[j] > 0 {
				id[j]--
				break
			}
		}
	}
	s.mu.Unlock()
	tt := time.Unix(0, t).UTC()
	resp := survey.Response{ResponseID: survey.GUID(id.String()), ResponseStatus: statusNames[q.status]}
	if q.status == stPartial {
		resp.DateCreated = survey.Time{Time: tt}
	} else {
		resp.DateCreated = survey.Time{Time: tt.Add(-7 * time.Minute)}
		resp.DateCompleted = &survey.Time{Time: tt}
	}
	if _, err := s.AddResponse(surveyID, resp); err != nil {
		s.log.Warn("sim: shift fault could not insert a response", "survey_id", surveyID, "err", err)
	}
}

// sanitize replaces invalid UTF-8 in every string of r by U+FFFD, as
// encoding/json would on the wire; the encoder relies on valid strings.
func sanitize(r *survey.Response) {
	fix := func(s *string) {
		if s != nil && !utf8.ValidString(*s) {
			*s = strings.ToValidUTF8(*s, "\ufffd")
		}
	}
	fix(&r.SurveyName)
	fix(&r.IPAddress)
	fix(&r.ResponseStatus)
	for k := range r.URLParameters {
		fix(&r.URLParameters[k].Name)
		fix(&r.URLParameters[k].Value)
	}
	for p := range r.Pages {
		for q := range r.Pages[p].Questions {
			qq := &r.Pages[p].Questions[q]
			fix(&qq.Type)
			fix(&qq.Title)
			fix(&qq.Variable)
			for a := range qq.Answers {
				aa := &qq.Answers[a]
				fix(aa.RowLabel)
				fix(aa.ColumnLabel)
				fix(aa.ChoiceLabel)
				fix(aa.Text)
			}
		}
	}
}
