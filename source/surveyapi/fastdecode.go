package surveyapi

import (
	"bytes"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/surveysync/surveysync/survey"
)

// Decoding a response detail is a third of the daemon's CPU time with
// encoding/json (reflection, a validating pre-pass, a second pass for each
// custom type), and while a fetcher decodes, its API slot is idle. So the
// detail has a decoder of its own for the shape the service sends: one pass,
// no reflection, the same result as encoding/json.
//
// It is exact by refusing: whatever it does not handle precisely as
// encoding/json would (a key in another case or given twice, a number with
// a fraction or given as text, a null where encoding/json would call a
// custom decoder, a string with invalid UTF-8 or a lone surrogate, a value
// of another type, anything not valid JSON) makes it give up, and the body
// goes to encoding/json (decodeResult), which decodes the unusual forms and
// words every error. FuzzFastResponse checks the two agree on every body
// the fast path accepts. Why not a library: docs/client.md, "Decoding".

// fastResponse decodes a detail envelope ({"meta": {...}, "result": {...}}).
// ok is false when the body must go to encoding/json instead.
// names, if not nil, interns the strings that repeat from one response to
// the next (labels, titles, types, names): one copy of each, shared by the
// responses held at once, instead of an allocation each.
func fastResponse(body []byte, names *interner) (r *survey.Response, requestID string, ok bool) {
	d := fastDecoder{b: body, names: names}
	var reqID, reqIDSnake string
	var have uint8
	r = new(survey.Response)
	ok = d.object(func(key []byte) bool {
		switch string(key) {
		case "meta":
			return once(&have, 1) && d.meta(&reqID, &reqIDSnake)
		case "result":
			return once(&have, 2) && d.response(r)
		}
		return d.unknown(key, "meta", "result")
	})
	if !ok || have&2 == 0 {
		return nil, "", false
	}
	d.ws()
	if d.i != len(d.b) {
		return nil, "", false
	}
	if reqID == "" {
		reqID = reqIDSnake
	}
	return r, reqID, true
}

// fastDecoder is a position in a JSON text. Its methods report false to
// give up; the position is then of no use.
type fastDecoder struct {
	b     []byte
	i     int
	buf   []byte    // unescaping scratch
	names *interner // may be nil

	// The optional fields point into slabs, a few allocations per detail
	// instead of one per field; they live as long as the detail does.
	ints  []int64
	flexs []survey.FlexInt
	strs  []string

	// Scratch of the arrays being read, one per level; each array is
	// copied out at its exact length.
	params    []survey.URLParameter
	pages     []survey.Page
	questions []survey.Question
	answers   []survey.Answer
}

// slabSize is how many values a slab holds.
const slabSize = 32

// newInt, newFlex and newStr return a pointer to a fresh value in a slab.
func (d *fastDecoder) newInt(v int64) *int64 {
	if len(d.ints) == cap(d.ints) {
		d.ints = make([]int64, 0, slabSize)
	}
	d.ints = append(d.ints, v)
	return &d.ints[len(d.ints)-1]
}

func (d *fastDecoder) newFlex(v int64) *survey.FlexInt {
	if len(d.flexs) == cap(d.flexs) {
		d.flexs = make([]survey.FlexInt, 0, slabSize)
	}
	d.flexs = append(d.flexs, survey.FlexInt(v))
	return &d.flexs[len(d.flexs)-1]
}

func (d *fastDecoder) newStr(v string) *string {
	if len(d.strs) == cap(d.strs) {
		d.strs = make([]string, 0, slabSize)
	}
	d.strs = append(d.strs, v)
	return &d.strs[len(d.strs)-1]
}

// maxSkipDepth bounds the nesting of values the decoder skips; deeper
// ones go to encoding/json.
const maxSkipDepth = 64

func (d *fastDecoder) ws() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// peek returns the next byte after whitespace (0 at the end).
func (d *fastDecoder) peek() byte {
	d.ws()
	if d.i < len(d.b) {
		return d.b[d.i]
	}
	return 0
}

func (d *fastDecoder) consume(c byte) bool {
	if d.peek() == c {
		d.i++
		return true
	}
	return false
}

// literal consumes the literal word (true, false, null).
func (d *fastDecoder) literal(word string) bool {
	if d.peek() == word[0] && bytes.HasPrefix(d.b[d.i:], []byte(word)) {
		d.i += len(word)
		return true
	}
	return false
}

// null consumes a null if one is next.
func (d *fastDecoder) null() bool { return d.literal("null") }

// once marks bit in have, failing if it was marked: a key given twice is
// left to encoding/json (which merges or replaces, depending on the type).
func once[T uint8 | uint16](have *T, bit T) bool {
	if *have&bit != 0 {
		return false
	}
	*have |= bit
	return true
}

// unknown skips the value of a key the struct does not have, unless
// encoding/json would match it to one of known (it matches names without
// regard to case).
func (d *fastDecoder) unknown(key []byte, known ...string) bool {
	for _, k := range known {
		if bytes.EqualFold(key, []byte(k)) {
			return false
		}
	}
	return d.skip(0)
}

// object calls member for each member of an object, positioned at its
// value. Keys are raw bytes, valid until the next call; a key with an
// escape gives up.
func (d *fastDecoder) object(member func(key []byte) bool) bool {
	if !d.consume('{') {
		return false
	}
	if d.consume('}') {
		return true
	}
	for {
		key, ok := d.rawKey()
		if !ok || !d.consume(':') || !member(key) {
			return false
		}
		if d.consume(',') {
			continue
		}
		return d.consume('}')
	}
}

// array calls elem for each element of an array, positioned at it. null
// is not an array (the caller handles it).
func (d *fastDecoder) array(elem func() bool) bool {
	if !d.consume('[') {
		return false
	}
	if d.consume(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if d.consume(',') {
			continue
		}
		return d.consume(']')
	}
}

// rawKey reads a key without escapes.
func (d *fastDecoder) rawKey() ([]byte, bool) {
	if d.peek() != '"' {
		return nil, false
	}
	start := d.i + 1
	for j := start; j < len(d.b); j++ {
		switch c := d.b[j]; {
		case c == '"':
			d.i = j + 1
			return d.b[start:j], true
		case c == '\\' || c < 0x20:
			return nil, false
		}
	}
	return nil, false
}

// str reads a string value exactly as encoding/json would decode it, giving
// up where encoding/json would replace bytes (invalid UTF-8, a lone
// surrogate).
func (d *fastDecoder) str() (string, bool) {
	if d.peek() != '"' {
		return "", false
	}
	start := d.i + 1
	end := bytes.IndexByte(d.b[start:], '"')
	if end < 0 {
		return "", false
	}
	raw := d.b[start : start+end]
	if k := bytes.IndexByte(raw, '\\'); k >= 0 {
		return d.unescape(start, start+k)
	}
	var hi byte
	for _, c := range raw {
		if c < 0x20 {
			return "", false
		}
		hi |= c
	}
	if hi >= utf8.RuneSelf && !utf8.Valid(raw) {
		return "", false
	}
	d.i = start + end + 1
	return string(raw), true
}

// name reads a string that likely repeats across responses (a label, a
// title): interned.
func (d *fastDecoder) name() (string, bool) {
	if d.names == nil || d.peek() != '"' {
		return d.str()
	}
	start := d.i + 1
	end := bytes.IndexByte(d.b[start:], '"')
	raw := d.b[start : start+max(end, 0)]
	if end < 0 || end > maxInterned || bytes.IndexByte(raw, '\\') >= 0 {
		return d.str() // only strings without escapes are interned: their bytes are their value
	}
	if s, ok := d.names.m[string(raw)]; ok {
		d.i = start + end + 1 // the same bytes were checked when first seen
		return s, true
	}
	s, ok := d.str()
	if ok && len(d.names.m) < maxNames {
		d.names.m[s] = s
	}
	return s, ok
}

// interner holds one copy of each repeated string; not safe for
// concurrent use (the client keeps them in a sync.Pool).
type interner struct{ m map[string]string }

func newInterner() *interner { return &interner{m: make(map[string]string, 256)} }

// An interner holds at most maxNames strings of at most maxInterned bytes:
// a few hundred KB, whatever the service sends.
const (
	maxNames    = 4096
	maxInterned = 128
)

// unescape finishes a string that has an escape at j.
func (d *fastDecoder) unescape(start, j int) (string, bool) {
	for _, c := range d.b[start:j] {
		if c < 0x20 {
			return "", false
		}
	}
	out := append(d.buf[:0], d.b[start:j]...)
	for j < len(d.b) {
		c := d.b[j]
		switch {
		case c == '"':
			d.buf = out
			if !utf8.Valid(out) {
				return "", false
			}
			d.i = j + 1
			return string(out), true
		case c < 0x20:
			return "", false
		case c != '\\':
			out = append(out, c)
			j++
			continue
		}
		if j+1 >= len(d.b) {
			return "", false
		}
		switch e := d.b[j+1]; e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := hex4(d.b, j+2)
			if !ok {
				return "", false
			}
			if r >= 0xD800 && r < 0xE000 {
				// Only a high surrogate followed by a low one is a rune.
				if r >= 0xDC00 || j+7 >= len(d.b) || d.b[j+6] != '\\' || d.b[j+7] != 'u' {
					return "", false
				}
				lo, ok := hex4(d.b, j+8)
				if !ok || lo < 0xDC00 || lo >= 0xE000 {
					return "", false
				}
				r = 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00)
				j += 6
			}
			out = utf8.AppendRune(out, r)
			j += 6
			continue
		default:
			return "", false
		}
		j += 2
	}
	return "", false
}

// hex4 reads the four hexadecimal digits of a \u escape at b[at:].
func hex4(b []byte, at int) (rune, bool) {
	if at+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[at : at+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// int reads a JSON number that is a plain integer of at most 18 digits
// (what encoding/json decodes into an int64 without error); a fraction,
// an exponent or a longer number gives up.
func (d *fastDecoder) int() (int64, bool) {
	d.ws()
	j := d.i
	neg := j < len(d.b) && d.b[j] == '-'
	if neg {
		j++
	}
	start := j
	var v int64
	for j < len(d.b) && d.b[j] >= '0' && d.b[j] <= '9' {
		v = v*10 + int64(d.b[j]-'0')
		j++
	}
	n := j - start
	if n == 0 || n > 18 || (d.b[start] == '0' && n > 1) {
		return 0, false
	}
	if j < len(d.b) {
		switch d.b[j] {
		case '.', 'e', 'E':
			return 0, false
		}
	}
	d.i = j
	if neg {
		v = -v
	}
	return v, true
}

// skip validates and skips any JSON value.
func (d *fastDecoder) skip(depth int) bool {
	if depth > maxSkipDepth {
		return false
	}
	switch c := d.peek(); {
	case c == '{':
		return d.object(func([]byte) bool { return d.skip(depth + 1) })
	case c == '[':
		return d.array(func() bool { return d.skip(depth + 1) })
	case c == '"':
		return d.skipString()
	case c == 't':
		return d.literal("true")
	case c == 'f':
		return d.literal("false")
	case c == 'n':
		return d.null()
	case c == '-' || (c >= '0' && c <= '9'):
		return d.skipNumber()
	}
	return false
}

// skipString skips a string, checking its escapes (encoding/json accepts
// any other byte from 0x20 in a string it does not decode).
func (d *fastDecoder) skipString() bool {
	for j := d.i + 1; j < len(d.b); j++ {
		switch c := d.b[j]; {
		case c == '"':
			d.i = j + 1
			return true
		case c < 0x20:
			return false
		case c == '\\':
			if j+1 >= len(d.b) {
				return false
			}
			switch d.b[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j++
			case 'u':
				if _, ok := hex4(d.b, j+2); !ok {
					return false
				}
				j += 5
			default:
				return false
			}
		}
	}
	return false
}

// skipNumber skips a number by JSON's grammar.
func (d *fastDecoder) skipNumber() bool {
	b, j := d.b, d.i
	digits := func() int {
		k := j
		for j < len(b) && b[j] >= '0' && b[j] <= '9' {
			j++
		}
		return j - k
	}
	if j < len(b) && b[j] == '-' {
		j++
	}
	switch {
	case j < len(b) && b[j] == '0':
		j++
	case digits() == 0:
		return false
	}
	if j < len(b) && b[j] == '.' {
		j++
		if digits() == 0 {
			return false
		}
	}
	if j < len(b) && (b[j] == 'e' || b[j] == 'E') {
		j++
		if j < len(b) && (b[j] == '+' || b[j] == '-') {
			j++
		}
		if digits() == 0 {
			return false
		}
	}
	d.i = j
	return true
}

// meta reads the envelope's meta: the request id in either spelling. The
// error fields of an error body are not expected here: they give up.
func (d *fastDecoder) meta(reqID, reqIDSnake *string) bool {
	if d.null() {
		return true
	}
	var have uint8
	return d.object(func(key []byte) bool {
		switch string(key) {
		case "requestId":
			return once(&have, 1) && d.optString(reqID, false)
		case "request_id":
			return once(&have, 2) && d.optString(reqIDSnake, false)
		case "http_status":
			return once(&have, 4) && d.skip(0)
		case "status_code":
			return once(&have, 8) && d.skip(0)
		}
		return d.unknown(key, "requestId", "request_id", "http_status", "status_code", "errors", "message")
	})
}

// text reads a string; repeats marks one that likely repeats across
// responses (a label, a title), which is interned.
func (d *fastDecoder) text(repeats bool) (string, bool) {
	if repeats {
		return d.name()
	}
	return d.str()
}

// optString reads a string field: null leaves it as it is.
func (d *fastDecoder) optString(dst *string, repeats bool) bool {
	if d.null() {
		return true
	}
	s, ok := d.text(repeats)
	*dst = s
	return ok
}

// strPtr reads a *string field: null is nil.
func (d *fastDecoder) strPtr(dst **string, repeats bool) bool {
	if d.null() {
		*dst = nil
		return true
	}
	s, ok := d.text(repeats)
	*dst = d.newStr(s)
	return ok
}

// optInt reads an int64 field: null leaves it as it is.
func (d *fastDecoder) optInt(dst *int64) bool {
	if d.null() {
		return true
	}
	v, ok := d.int()
	*dst = v
	return ok
}

// intPtr reads an *int64 field: null is nil.
func (d *fastDecoder) intPtr(dst **int64) bool {
	if d.null() {
		*dst = nil
		return true
	}
	v, ok := d.int()
	*dst = d.newInt(v)
	return ok
}

// flexPtr reads a *survey.FlexInt field: null is nil. Handled here: a
// plain integer, and an integer as text that strconv.ParseInt reads after
// trimming spaces (as FlexInt's decoder does first); anything else (a
// fraction, an exponent) gives up.
func (d *fastDecoder) flexPtr(dst **survey.FlexInt) bool {
	if d.null() {
		*dst = nil
		return true
	}
	var v int64
	ok := false
	if d.peek() == '"' {
		var s string
		if s, ok = d.str(); ok {
			var err error
			v, err = strconv.ParseInt(strings.TrimSpace(s), 10, 64)
			ok = err == nil
		}
	} else {
		v, ok = d.int()
	}
	*dst = d.newFlex(v)
	return ok
}

// guid reads a survey.GUID (null gives up: encoding/json hands it to the
// GUID's decoder, which refuses it).
func (d *fastDecoder) guid() (survey.GUID, bool) {
	s, ok := d.str()
	if !ok {
		return "", false
	}
	g, err := survey.ParseGUID(s)
	return g, err == nil
}

// guidPtr reads a *survey.GUID: null is nil.
func (d *fastDecoder) guidPtr(dst **survey.GUID) bool {
	if d.null() {
		*dst = nil
		return true
	}
	g, ok := d.guid()
	*dst = &g
	return ok
}

// time reads a survey.Time (null gives up, to encoding/json).
func (d *fastDecoder) time(dst *survey.Time) bool {
	s, ok := d.str()
	if !ok {
		return false
	}
	t, err := survey.ParseTime(s)
	dst.Time = t
	return err == nil
}

// timePtr reads a *survey.Time: null is nil.
func (d *fastDecoder) timePtr(dst **survey.Time) bool {
	if d.null() {
		*dst = nil
		return true
	}
	t := new(survey.Time)
	*dst = t
	return d.time(t)
}

// slice decodes an array into *dst as encoding/json does (null is nil, []
// an empty slice that is not nil), each element by elem in place, in
// scratch (the decoder's buffer of that level), copied out at its length. A
// null element gives up.
func slice[T any](d *fastDecoder, dst *[]T, scratch *[]T, elem func(*fastDecoder, *T) bool) bool {
	if d.null() {
		*dst = nil
		return true
	}
	s := (*scratch)[:0]
	var zero T
	ok := d.array(func() bool {
		if d.peek() == 'n' {
			return false
		}
		s = append(s, zero)
		return elem(d, &s[len(s)-1])
	})
	*dst = append(make([]T, 0, len(s)), s...)
	clear(s) // the scratch keeps no strings alive
	*scratch = s
	return ok
}

var responseKeys = []string{"response_id", "survey_id", "contact_id", "distribution_id", "survey_name",
	"ip_address", "date_created", "date_completed", "total_time", "response_status", "url_parameters", "pages"}

func (d *fastDecoder) response(r *survey.Response) bool {
	if d.peek() != '{' {
		return false // null is no result: encoding/json's path words the error
	}
	var have uint16
	return d.object(func(key []byte) bool {
		switch string(key) {
		case "response_id":
			if !once(&have, 1<<0) {
				return false
			}
			g, ok := d.guid()
			r.ResponseID = g
			return ok
		case "survey_id":
			return once(&have, 1<<1) && d.optInt(&r.SurveyID)
		case "contact_id":
			return once(&have, 1<<2) && d.intPtr(&r.ContactID)
		case "distribution_id":
			return once(&have, 1<<3) && d.intPtr(&r.DistributionID)
		case "survey_name":
			return once(&have, 1<<4) && d.optString(&r.SurveyName, true)
		case "ip_address":
			return once(&have, 1<<5) && d.optString(&r.IPAddress, false)
		case "date_created":
			return once(&have, 1<<6) && d.time(&r.DateCreated)
		case "date_completed":
			return once(&have, 1<<7) && d.timePtr(&r.DateCompleted)
		case "total_time":
			return once(&have, 1<<8) && d.flexPtr(&r.TotalTime)
		case "response_status":
			return once(&have, 1<<9) && d.optString(&r.ResponseStatus, true)
		case "url_parameters":
			return once(&have, 1<<10) && slice(d, &r.URLParameters, &d.params, (*fastDecoder).urlParameter)
		case "pages":
			return once(&have, 1<<11) && slice(d, &r.Pages, &d.pages, (*fastDecoder).page)
		}
		return d.unknown(key, responseKeys...)
	})
}

func (d *fastDecoder) urlParameter(p *survey.URLParameter) bool {
	var have uint8
	return d.object(func(key []byte) bool {
		switch string(key) {
		case "name":
			return once(&have, 1) && d.optString(&p.Name, true)
		case "value":
			return once(&have, 2) && d.optString(&p.Value, false)
		}
		return d.unknown(key, "name", "value")
	})
}

func (d *fastDecoder) page(p *survey.Page) bool {
	var have uint8
	return d.object(func(key []byte) bool {
		switch string(key) {
		case "id":
			return once(&have, 1) && d.optInt(&p.ID)
		case "questions":
			return once(&have, 2) && slice(d, &p.Questions, &d.questions, (*fastDecoder).question)
		}
		return d.unknown(key, "id", "questions")
	})
}

func (d *fastDecoder) question(q *survey.Question) bool {
	var have uint8
	return d.object(func(key []byte) bool {
		switch string(key) {
		case "id":
			return once(&have, 1) && d.optInt(&q.ID)
		case "type":
			return once(&have, 2) && d.optString(&q.Type, true)
		case "title":
			return once(&have, 4) && d.optString(&q.Title, true)
		case "variable":
			return once(&have, 8) && d.optString(&q.Variable, true)
		case "answers":
			return once(&have, 16) && slice(d, &q.Answers, &d.answers, (*fastDecoder).answer)
		}
		return d.unknown(key, "id", "type", "title", "variable", "answers")
	})
}

var answerKeys = []string{"row_id", "row_label", "column_id", "column_label", "choice_id",
	"choice_label", "other_id", "text", "value", "file_id"}

func (d *fastDecoder) answer(a *survey.Answer) bool {
	var have uint16
	return d.object(func(key []byte) bool {
		switch string(key) {
		case "row_id":
			return once(&have, 1<<0) && d.flexPtr(&a.RowID)
		case "row_label":
			return once(&have, 1<<1) && d.strPtr(&a.RowLabel, true)
		case "column_id":
			return once(&have, 1<<2) && d.flexPtr(&a.ColumnID)
		case "column_label":
			return once(&have, 1<<3) && d.strPtr(&a.ColumnLabel, true)
		case "choice_id":
			return once(&have, 1<<4) && d.flexPtr(&a.ChoiceID)
		case "choice_label":
			return once(&have, 1<<5) && d.strPtr(&a.ChoiceLabel, true)
		case "other_id":
			return once(&have, 1<<6) && d.flexPtr(&a.OtherID)
		case "text":
			return once(&have, 1<<7) && d.strPtr(&a.Text, false)
		case "value":
			return once(&have, 1<<8) && d.flexPtr(&a.Value)
		case "file_id":
			return once(&have, 1<<9) && d.guidPtr(&a.FileID)
		}
		return d.unknown(key, answerKeys...)
	})
}
