package sim

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/surveysync/surveysync/survey"
)

// Contacts and sends (docs/api.md §4.1, §4.2).

// ReceivedContact is a contact the emulator created.
type ReceivedContact struct {
	ID             int64           `json:"id"`
	DistributionID int64           `json:"distribution_id"`
	Contact        survey.Contact  `json:"contact"`
	Raw            json.RawMessage `json:"raw"` // the body as received
	SurveyURL      string          `json:"survey_url"`
	CreatedAt      time.Time       `json:"created_at"`
	Salutation     string          `json:"salutation,omitempty"` // given or generated
}

// ReceivedSend is a send request the emulator accepted.
type ReceivedSend struct {
	DistributionID int64                `json:"distribution_id"`
	MessageID      int64                `json:"message_id"`
	ScheduledDate  *time.Time           `json:"scheduled_date,omitempty"`
	At             time.Time            `json:"at"`
	Result         survey.ContactsCount `json:"result"` // what the call answered
}

type contactRec struct {
	ReceivedContact
	sends map[int64]int64 // message id → unix ns it is (to be) sent at
}

// bounces reports whether mail to this contact bounces: an address without
// "@" or containing "bounce".
func (c *contactRec) bounces() bool {
	e := c.Contact.Email
	return e != "" && (!strings.Contains(e, "@") || strings.Contains(e, "bounce"))
}

// knownDistribution returns the survey id and kind of a distribution id that
// belongs to a survey of the emulator.
func (s *Sim) knownDistribution(did int64) (int64, int, bool) {
	k := distKind(did)
	if k == 0 {
		return 0, 0, false
	}
	s.mu.RLock()
	_, ok := s.surveys[did/10]
	s.mu.RUnlock()
	return did / 10, k, ok
}

func (c *call) distributionID(s string) (int64, int, bool) {
	did, err := strconv.ParseInt(s, 10, 64)
	if err != nil || did <= 0 {
		c.fail(http.StatusNotFound, "Distribution not found")
		return 0, 0, false
	}
	_, kind, known := c.s.knownDistribution(did)
	if !known && c.s.opts.RejectUnknownDistributions {
		c.fail(http.StatusNotFound, "Distribution not found")
		return 0, 0, false
	}
	return did, kind, true
}

func (c *call) createContact(seg []string) {
	did, kind, ok := c.distributionID(seg[1])
	if !ok {
		return
	}
	raw, err := io.ReadAll(io.LimitReader(c.r.Body, 1<<20))
	if err != nil {
		c.fail(http.StatusBadRequest, "Cannot read the request body")
		return
	}
	var ct survey.Contact
	if err := json.Unmarshal(raw, &ct); err != nil {
		c.fail(http.StatusBadRequest, "Invalid JSON body: "+err.Error())
		return
	}
	var missing []string
	if ct.SalutationGenerate != nil && *ct.SalutationGenerate && ct.Salutation == "" {
		if strings.TrimSpace(ct.FirstName) == "" {
			missing = append(missing, "first_name")
		}
		if strings.TrimSpace(ct.LastName) == "" {
			missing = append(missing, "last_name")
		}
	}
	if kind == distEmail && ct.Email == "" {
		missing = append(missing, "email")
	}
	if kind == distCATI && ct.Phone == "" && ct.Mobile == "" {
		missing = append(missing, "phone")
	}
	if len(missing) > 0 {
		c.fail(http.StatusMethodNotAllowed, "Required fields missing: "+strings.Join(missing, ", "))
		return
	}
	if ct.Email != "" && !strings.Contains(ct.Email, "@") && !strings.Contains(ct.Email, "bounce") {
		c.fail(http.StatusBadRequest, "Invalid email address: "+ct.Email)
		return
	}
	s := c.s
	now := sec100ns(s.now()).Truncate(time.Second)
	s.cmu.Lock()
	s.contactID++
	id := s.contactID
	tr := newRNG(s.key, uint64(id), 0xc0)
	tok := randomGUID(tr.next(), tr.next())
	surveyID := did
	if sid, _, known := s.knownDistribution(did); known {
		surveyID = sid
	}
	rec := &contactRec{ReceivedContact: ReceivedContact{
		ID: id, DistributionID: did, Contact: ct, Raw: raw, CreatedAt: now,
		SurveyURL:  "https://www.click4survey.cz/m4/" + strconv.FormatInt(surveyID, 10) + "/" + strings.ReplaceAll(tok.String(), "-", ""),
		Salutation: salutation(&ct),
	}, sends: map[int64]int64{}}
	s.contacts[did] = append(s.contacts[did], rec)
	s.cmu.Unlock()
	c.ok(http.StatusCreated, func(b []byte) []byte {
		b = append(b, `{"id":`...)
		b = strconv.AppendInt(b, id, 10)
		b = append(b, `,"survey_url":`...)
		b = appendJSONString(b, rec.SurveyURL)
		b = append(b, `,"created_at":`...)
		b = appendTime(b, now)
		return append(b, '}')
	})
}

func (c *call) sendMessage(seg []string) {
	did, _, ok := c.distributionID(seg[1])
	if !ok {
		return
	}
	mid, err := strconv.ParseInt(seg[3], 10, 64)
	if err != nil || mid <= 0 {
		c.fail(http.StatusNotFound, "Message not found")
		return
	}
	var req struct {
		ScheduledDate *string `json:"scheduled_date"`
	}
	raw, err := io.ReadAll(io.LimitReader(c.r.Body, 1<<20))
	if err != nil {
		c.fail(http.StatusBadRequest, "Cannot read the request body")
		return
	}
	if len(strings.TrimSpace(string(raw))) > 0 {
		if err := json.Unmarshal(raw, &req); err != nil {
			c.fail(http.StatusBadRequest, "Invalid JSON body: "+err.Error())
			return
		}
	}
	s := c.s
	now := s.now()
	at := now
	var sched *time.Time
	if req.ScheduledDate != nil {
		t, err := survey.ParseTime(*req.ScheduledDate)
		if err != nil {
			c.fail(http.StatusBadRequest, "Invalid parameter scheduled_date: must be a date like 2022-10-10T10:00:00.000Z")
			return
		}
		if t.After(now) {
			at = t
		}
		sched = &t
	}
	s.cmu.Lock()
	var cc survey.ContactsCount
	for _, rec := range s.contacts[did] {
		if _, done := rec.sends[mid]; !done {
			rec.sends[mid] = at.UnixNano()
		}
		switch {
		case rec.sends[mid] > now.UnixNano():
			cc.Pending++
		case rec.bounces():
			cc.Bounces++
		default:
			cc.Sent++
		}
	}
	s.sends = append(s.sends, ReceivedSend{DistributionID: did, MessageID: mid, ScheduledDate: sched, At: now, Result: cc})
	s.cmu.Unlock()
	c.ok(http.StatusOK, func(b []byte) []byte {
		b = append(b, `{"contacts_count":{"pending":`...)
		b = strconv.AppendInt(b, cc.Pending, 10)
		b = append(b, `,"sent":`...)
		b = strconv.AppendInt(b, cc.Sent, 10)
		b = append(b, `,"bounces":`...)
		b = strconv.AppendInt(b, cc.Bounces, 10)
		return append(b, "}}"...)
	})
}

// Contacts returns the contacts created in a distribution, in order.
func (s *Sim) Contacts(distributionID int64) []ReceivedContact {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	out := make([]ReceivedContact, 0, len(s.contacts[distributionID]))
	for _, r := range s.contacts[distributionID] {
		out = append(out, r.ReceivedContact)
	}
	return out
}

// Sends returns every accepted send request, in order.
func (s *Sim) Sends() []ReceivedSend {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	return append([]ReceivedSend(nil), s.sends...)
}

// salutation returns the given salutation or, with salutation_generate, a
// rough Czech vocative ("Vážený pane Nováku", "Vážená paní Nováková").
func salutation(c *survey.Contact) string {
	if c.Salutation != "" {
		return c.Salutation
	}
	if c.SalutationGenerate == nil || !*c.SalutationGenerate {
		return ""
	}
	female := strings.HasSuffix(c.LastName, "ová") || strings.HasSuffix(c.LastName, "á")
	prefix := c.SalutationPrefixMale
	if female {
		prefix = c.SalutationPrefixFemale
	}
	if prefix == "" {
		prefix = "Vážený pane"
		if female {
			prefix = "Vážená paní"
		}
	}
	parts := []string{prefix}
	if c.SalutationIncludeFirstName != nil && *c.SalutationIncludeFirstName {
		parts = append(parts, vocative(c.FirstName, female))
	}
	if c.SalutationIncludeLastName == nil || *c.SalutationIncludeLastName {
		parts = append(parts, vocative(c.LastName, female))
	}
	return strings.Join(parts, " ")
}

func vocative(name string, female bool) string {
	if female || name == "" {
		return name
	}
	switch {
	case strings.HasSuffix(name, "ek"):
		return strings.TrimSuffix(name, "ek") + "ku"
	case strings.HasSuffix(name, "a"):
		return strings.TrimSuffix(name, "a") + "o"
	case strings.HasSuffix(name, "ý"), strings.HasSuffix(name, "í"), strings.HasSuffix(name, "e"), strings.HasSuffix(name, "o"), strings.HasSuffix(name, "u"):
		return name
	case strings.HasSuffix(name, "k"), strings.HasSuffix(name, "h"), strings.HasSuffix(name, "g"):
		return name + "u"
	case strings.HasSuffix(name, "tr"), strings.HasSuffix(name, "dr"), strings.HasSuffix(name, "br"):
		return strings.TrimSuffix(name, "r") + "ře"
	}
	return name + "e"
}
