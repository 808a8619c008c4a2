package sim

import (
	"strconv"
	"strings"
	"time"

	"github.com/surveysync/surveysync/survey"
)

// Hand-written JSON encoding of the service's bodies: several times faster
// than encoding/json, and it renders the service's variants (upper-case
// GUIDs, numbers as strings, missing titles, meta spellings) on request.
// TestEncodeMatchesEncodingJSON keeps it equal to encoding/json's reading.

// encOpts select the wire variants of one answer.
type encOpts struct {
	upper     bool // GUIDs in upper case (fault uppercase_guid)
	noTitle   bool // drop every question title (fault no_title)
	qfAsDisq  bool // quotafull detailed as disqualified (fault quotafull_as_disqualified)
	strValues bool // values of scale questions as JSON strings ("7")
	variant   int  // meta spelling: 0 request_id/http_status, 1 requestId/http_status, 2 request_id/status_code, 3 requestId/status_code
	badDate   int  // 0, or dateFuture / dateInvalid: the detail's last date is broken (faults future_date, invalid_date)
}

// Broken dates of the future_date and invalid_date faults.
const (
	dateFuture  = 1 // 2200-01-01T00:00:00Z: a valid timestamp beyond DateTime's 2106
	dateInvalid = 2 // "not a date"
)

// appendDate appends t, or the broken date of fault (when non-zero).
func appendDate(b []byte, t time.Time, fault int) []byte {
	switch fault {
	case dateFuture:
		return append(b, `"2200-01-01T00:00:00Z"`...)
	case dateInvalid:
		return append(b, `"not a date"`...)
	}
	return appendTime(b, t)
}

// appendJSONString appends s as a JSON string. Every string the emulator
// holds is valid UTF-8 (generated text is; stored responses are sanitised
// by normalize), so only ASCII needs escaping.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		b = appendEscape(b, c)
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

func appendEscape(b []byte, c byte) []byte {
	switch c {
	case '"':
		return append(b, '\\', '"')
	case '\\':
		return append(b, '\\', '\\')
	case '\n':
		return append(b, '\\', 'n')
	case '\r':
		return append(b, '\\', 'r')
	case '\t':
		return append(b, '\\', 't')
	}
	return append(b, '\\', 'u', '0', '0', hexLower[c>>4], hexLower[c&0xf])
}

func appendTime(b []byte, t time.Time) []byte {
	b = append(b, '"')
	b = t.UTC().AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

func appendGUIDString(b []byte, g survey.GUID, upper bool) []byte {
	if !upper { // stored GUIDs are lower case already
		return appendJSONString(b, string(g))
	}
	if id, ok := parseGUID16(string(g)); ok {
		b = append(b, '"')
		b = appendGUID(b, id, upper)
		return append(b, '"')
	}
	return appendJSONString(b, string(g))
}

func appendKey(b []byte, first *bool, key string) []byte {
	if !*first {
		b = append(b, ',')
	}
	*first = false
	b = append(b, '"')
	b = append(b, key...)
	return append(b, '"', ':')
}

// appendResponse encodes a response detail (docs/api.md §2.5).
func appendResponse(b []byte, r *survey.Response, o encOpts) []byte {
	b = append(b, `{"response_id":`...)
	b = appendGUIDString(b, r.ResponseID, o.upper)
	b = append(b, `,"survey_id":`...)
	b = strconv.AppendInt(b, r.SurveyID, 10)
	if r.ContactID != nil {
		b = append(b, `,"contact_id":`...)
		b = strconv.AppendInt(b, *r.ContactID, 10)
	}
	if r.DistributionID != nil {
		b = append(b, `,"distribution_id":`...)
		b = strconv.AppendInt(b, *r.DistributionID, 10)
	}
	b = append(b, `,"survey_name":`...)
	b = appendJSONString(b, r.SurveyName)
	b = append(b, `,"ip_address":`...)
	b = appendJSONString(b, r.IPAddress)
	b = append(b, `,"date_created":`...)
	if r.DateCompleted == nil {
		b = appendDate(b, r.DateCreated.Time, o.badDate)
	} else {
		b = appendTime(b, r.DateCreated.Time)
		b = append(b, `,"date_completed":`...)
		b = appendDate(b, r.DateCompleted.Time, o.badDate)
	}
	if r.TotalTime != nil {
		b = append(b, `,"total_time":`...)
		b = strconv.AppendInt(b, int64(*r.TotalTime), 10)
	}
	b = append(b, `,"response_status":`...)
	if o.qfAsDisq && r.ResponseStatus == survey.StatusQuotaFull {
		b = appendJSONString(b, survey.StatusDisqualified)
	} else {
		b = appendJSONString(b, r.ResponseStatus)
	}
	b = append(b, `,"url_parameters":[`...)
	for k, p := range r.URLParameters {
		if k > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"name":`...)
		b = appendJSONString(b, p.Name)
		b = append(b, `,"value":`...)
		b = appendJSONString(b, p.Value)
		b = append(b, '}')
	}
	b = append(b, `],"pages":[`...)
	for k := range r.Pages {
		if k > 0 {
			b = append(b, ',')
		}
		p := &r.Pages[k]
		b = append(b, `{"id":`...)
		b = strconv.AppendInt(b, p.ID, 10)
		b = append(b, `,"questions":[`...)
		for j := range p.Questions {
			if j > 0 {
				b = append(b, ',')
			}
			b = appendQuestion(b, &p.Questions[j], o)
		}
		b = append(b, "]}"...)
	}
	return append(b, "]}"...)
}

func appendQuestion(b []byte, q *survey.Question, o encOpts) []byte {
	b = append(b, `{"id":`...)
	b = strconv.AppendInt(b, q.ID, 10)
	b = append(b, `,"type":`...)
	b = appendJSONString(b, q.Type)
	if q.Title != "" && !o.noTitle {
		b = append(b, `,"title":`...)
		b = appendJSONString(b, q.Title)
	}
	if q.Variable != "" {
		b = append(b, `,"variable":`...)
		b = appendJSONString(b, q.Variable)
	}
	b = append(b, `,"answers":[`...)
	strValues := o.strValues && q.Type == "scale"
	upperText := o.upper && isFileType(q.Type)
	for k := range q.Answers {
		if k > 0 {
			b = append(b, ',')
		}
		b = appendAnswer(b, &q.Answers[k], strValues, upperText, o.upper)
	}
	return append(b, "]}"...)
}

// isFileType reports whether a question type is an upload question
// (docs/api.md: the type contains "file" or "upload").
func isFileType(t string) bool {
	return strings.Contains(t, "file") || strings.Contains(t, "upload")
}

func appendAnswer(b []byte, a *survey.Answer, strValue, upperText, upper bool) []byte {
	b = append(b, '{')
	first := true
	num := func(key string, v *survey.FlexInt) {
		if v != nil {
			b = appendKey(b, &first, key)
			b = strconv.AppendInt(b, int64(*v), 10)
		}
	}
	str := func(key string, v *string) {
		if v != nil {
			b = appendKey(b, &first, key)
			b = appendJSONString(b, *v)
		}
	}
	num("row_id", a.RowID)
	str("row_label", a.RowLabel)
	num("column_id", a.ColumnID)
	str("column_label", a.ColumnLabel)
	num("choice_id", a.ChoiceID)
	str("choice_label", a.ChoiceLabel)
	num("other_id", a.OtherID)
	if a.Text != nil {
		b = appendKey(b, &first, "text")
		if upperText {
			b = appendGUIDString(b, survey.GUID(*a.Text), true)
		} else {
			b = appendJSONString(b, *a.Text)
		}
	}
	if a.Value != nil {
		b = appendKey(b, &first, "value")
		if strValue {
			b = append(b, '"')
			b = strconv.AppendInt(b, int64(*a.Value), 10)
			b = append(b, '"')
		} else {
			b = strconv.AppendInt(b, int64(*a.Value), 10)
		}
	}
	if a.FileID != nil {
		b = appendKey(b, &first, "file_id")
		b = appendGUIDString(b, *a.FileID, upper)
	}
	return append(b, '}')
}

var metaKeys = [4][2]string{
	{`"request_id":`, `"http_status":`},
	{`"requestId":`, `"http_status":`},
	{`"request_id":`, `"status_code":`},
	{`"requestId":`, `"status_code":`},
}

// appendMeta encodes the envelope's meta object (without errors).
func appendMeta(b []byte, reqID guid16, status int, o encOpts) []byte {
	k := metaKeys[o.variant&3]
	b = append(b, `"meta":{`...)
	b = append(b, k[0]...)
	b = append(b, '"')
	b = appendGUID(b, reqID, o.upper)
	b = append(b, '"', ',')
	b = append(b, k[1]...)
	return strconv.AppendInt(b, int64(status), 10)
}

// appendErrorBody encodes the service's error body:
// {"meta":{"requestId":…,"http_status":N,"errors":[{"error_message":…}]}}.
func appendErrorBody(b []byte, reqID guid16, status int, msg string, o encOpts) []byte {
	if o.variant == 0 {
		o.variant = 1 // the service's error sample spells requestId
	}
	b = append(b, '{')
	b = appendMeta(b, reqID, status, o)
	b = append(b, `,"errors":[{"error_message":`...)
	b = appendJSONString(b, msg)
	return append(b, "}]}}"...)
}
