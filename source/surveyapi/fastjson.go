package surveyapi

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"

	"github.com/surveysync/surveysync/pipeline/survey"
)

// A fast path for the two hot decodes: a response detail and a list page.
//
// encoding/json spends most of its time on reflection and on the custom
// UnmarshalJSON methods of survey.GUID, survey.Time and survey.FlexInt
// (each re-enters json.Unmarshal). The reader below walks the bytes once,
// straight into the typed structs. It only ever accepts what encoding/json
// would decode to the very same value: anything unusual — a syntax error,
// a key matching a field only case-insensitively, a repeated non-empty
// array (encoding/json merges it into the first), a number with a fraction
// in an integer field, a lone surrogate, invalid UTF-8, null where a value
// type is expected — makes it give up, and the caller decodes the same
// bytes with encoding/json, which then also produces the canonical error.
// FuzzFastDecode checks the equivalence.

// jreader walks a JSON document.
type jreader struct {
	b       []byte
	src     string // b as a string (a copy, or b itself when owned): unescaped strings are substrings of it
	i       int
	scratch []byte           // unescaping
	strs    []string         // slab behind *string fields
	ints    []survey.FlexInt // slab behind *FlexInt fields
	qs      slab[survey.Question]
	as      slab[survey.Answer]
}

// slab hands out contiguous runs of T (the elements of one slice) from
// shared backing arrays, so that a response's questions and answers cost a
// few allocations instead of one per question. A new backing array holds
// at least size elements (and at least 4); a slab that starts empty (one
// of its own for a single slice) allocates nothing for [].
type slab[T any] struct {
	buf  []T
	size int
}

// add appends a zero T to the run that began at *start and returns it. When
// the backing array is full, the run so far moves to a new one (pointers
// handed out earlier for this run are then stale: fill each T before the
// next add).
func (s *slab[T]) add(start *int) *T {
	if len(s.buf) == cap(s.buf) {
		run := s.buf[*start:]
		nb := make([]T, len(run), max(4, s.size, 2*cap(s.buf), 2*len(run)))
		copy(nb, run)
		s.buf, *start = nb, 0
	}
	s.buf = s.buf[:len(s.buf)+1]
	return &s.buf[len(s.buf)-1]
}

// run returns the run that began at start, capped so that appending to it
// cannot overwrite the next run; never nil (encoding/json makes [] an empty,
// non-nil slice).
func (s *slab[T]) run(start int) []T {
	if len(s.buf) == start {
		return []T{}
	}
	return s.buf[start:len(s.buf):len(s.buf)]
}

func (r *jreader) ws() {
	for r.i < len(r.b) && r.b[r.i] <= ' ' {
		switch r.b[r.i] {
		case ' ', '\t', '\n', '\r':
			r.i++
		default:
			return
		}
	}
}

// peek returns the next non-space byte, 0 at the end.
func (r *jreader) peek() byte {
	r.ws()
	if r.i >= len(r.b) {
		return 0
	}
	return r.b[r.i]
}

func (r *jreader) consume(c byte) bool {
	if r.peek() == c {
		r.i++
		return true
	}
	return false
}

func (r *jreader) literal(lit string) bool {
	if len(r.b)-r.i >= len(lit) && string(r.b[r.i:r.i+len(lit)]) == lit {
		r.i += len(lit)
		return true
	}
	return false
}

// null consumes a null if one is next. It is inlined (the decoders call it
// for nearly every value), with a short cut for a value that starts right
// here with a byte in '!'..'m' — a string, a number, an array, false — so
// is no null; space, 'n' and the rest take the long way.
func (r *jreader) null() bool {
	if r.i < len(r.b) && r.b[r.i]-'!' < 'n'-'!' {
		return false
	}
	return r.nullAhead()
}

func (r *jreader) nullAhead() bool {
	return r.peek() == 'n' && r.literal("null")
}

// end reports whether only white space is left.
func (r *jreader) end() bool {
	r.ws()
	return r.i == len(r.b)
}

// Byte classes inside a JSON string.
const (
	chPlain = iota
	chQuote
	chEscape
	chControl
	chHigh
)

var strClass = func() (t [256]uint8) {
	for c := range t {
		switch {
		case c == '"':
			t[c] = chQuote
		case c == '\\':
			t[c] = chEscape
		case c < 0x20:
			t[c] = chControl
		case c >= 0x80:
			t[c] = chHigh
		}
	}
	return t
}()

// rawString reads a string and returns its bytes between the quotes,
// validated (escapes well-formed, no control characters, valid UTF-8).
func (r *jreader) rawString() (s []byte, escaped, ok bool) {
	if r.peek() != '"' {
		return nil, false, false
	}
	r.i++
	b := r.b
	start := r.i
	for i := r.i; i < len(b); {
		i = plainRun(b, i)
		if i == len(b) {
			break
		}
		switch strClass[b[i]] {
		case chHigh:
			// Two-byte sequences (Czech diacritics) inline; the rest via utf8.
			if c := b[i]; c >= 0xC2 && c <= 0xDF && i+1 < len(b) && b[i+1]&0xC0 == 0x80 {
				i += 2
				continue
			}
			if _, size := utf8.DecodeRune(b[i:]); size > 1 {
				i += size
				continue
			}
			return nil, false, false // invalid UTF-8
		case chQuote:
			s = b[start:i]
			r.i = i + 1
			return s, escaped, true
		case chEscape:
			escaped = true
			i++
			if i >= len(b) {
				return nil, false, false
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i++
			case 'u':
				if len(b)-i < 5 {
					return nil, false, false
				}
				for _, h := range b[i+1 : i+5] {
					if unhex(h) < 0 {
						return nil, false, false
					}
				}
				i += 5
			default:
				return nil, false, false
			}
		default: // control character
			return nil, false, false
		}
	}
	return nil, false, false
}

// special8 returns the bytes among 8 (little endian) that end a run of
// plain string bytes — a quote, a backslash, a control character, a byte
// >= 0x80 — as the high bit of each such byte (SWAR: the classic
// has-zero-byte and has-less-than tricks). Only the lowest set bit is
// exact (a borrow may flag bytes above a match): what plainRun needs.
func special8(x uint64) uint64 {
	const (
		lo = 0x0101010101010101
		hi = 0x8080808080808080
	)
	quote := x ^ (lo * '"')
	bslash := x ^ (lo * '\\')
	t := (quote - lo) & ^quote
	t |= (bslash - lo) & ^bslash
	t |= (x - lo*0x20) & ^x
	return (t | x) & hi
}

// plainRun returns the index of the first byte from i on that is not a
// plain string byte (see special8), or len(b).
func plainRun(b []byte, i int) int {
	for ; i+8 <= len(b); i += 8 {
		if m := special8(binary.LittleEndian.Uint64(b[i:])); m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
	}
	for i < len(b) && strClass[b[i]] == chPlain {
		i++
	}
	return i
}

func unhex(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

func hex4(b []byte) rune {
	return rune(unhex(b[0])<<12 | unhex(b[1])<<8 | unhex(b[2])<<4 | unhex(b[3]))
}

// unescape decodes a validated string body with escapes. A lone surrogate
// gives up (encoding/json replaces it; not worth copying).
func (r *jreader) unescape(s []byte) (string, bool) {
	out := r.scratch[:0]
	for i := 0; i < len(s); {
		c := s[i]
		if c != '\\' {
			out = append(out, c)
			i++
			continue
		}
		switch s[i+1] {
		case '"', '\\', '/':
			out = append(out, s[i+1])
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
			ru := hex4(s[i+2 : i+6])
			i += 6
			if utf16.IsSurrogate(ru) {
				if i+6 > len(s) || s[i] != '\\' || s[i+1] != 'u' {
					return "", false
				}
				r2 := utf16.DecodeRune(ru, hex4(s[i+2:i+6]))
				if r2 == utf8.RuneError {
					return "", false
				}
				ru = r2
				i += 6
			}
			out = utf8.AppendRune(out, ru)
			continue
		}
		i += 2
	}
	r.scratch = out
	return string(out), true
}

// str reads a string value.
func (r *jreader) str() (string, bool) {
	s, esc, ok := r.rawString()
	if !ok {
		return "", false
	}
	if !esc {
		return r.substr(s), true
	}
	return r.unescape(s)
}

// substr returns the string of s, a subslice of r.b, without allocating:
// r.src holds the same bytes.
func (r *jreader) substr(s []byte) string {
	end := r.i - 1 // s ended right before the closing quote just consumed
	return r.src[end-len(s) : end]
}

// newReader returns a reader of body whose slabs for questions, answers,
// optional numbers and optional strings hold the given numbers of elements
// (they grow when that is short). src must hold the same bytes as body.
func newReader(body []byte, src string, questions, answers, ints, strs int) jreader {
	return jreader{
		b:    body,
		src:  src,
		qs:   slab[survey.Question]{buf: make([]survey.Question, 0, questions), size: 16},
		as:   slab[survey.Answer]{buf: make([]survey.Answer, 0, answers), size: 16},
		ints: make([]survey.FlexInt, 0, ints),
		strs: make([]string, 0, strs),
	}
}

// newDetailReader sizes the slabs of a response detail from its braces
// and brackets (two SIMD counts): every answer, question, page, URL
// parameter and the envelope, its meta and result are an object; every
// question's answers, every page's questions, the pages and the URL
// parameters an array. So answers <= objects - arrays - 1 and questions <=
// arrays - 3, exactly when no string holds a brace (a larger count only
// wastes a little). An answer carries about two optional numbers and one
// or two optional strings.
func newDetailReader(body []byte, src string) jreader {
	objs, arrs := bytes.Count(body, []byte{'{'}), bytes.Count(body, []byte{'['})
	a := max(objs-arrs-1, 1)
	return newReader(body, src, max(arrs-3, 1), a, 2*a+2, a+a/2+2)
}

// owned returns body as a string without copying. The caller gives up
// body: it must never be written again (the decoded strings share it).
func owned(body []byte) string {
	return unsafe.String(unsafe.SliceData(body), len(body))
}

// strInto reads a string into *dst; null leaves it as it is (encoding/json).
func (r *jreader) strInto(dst *string) bool {
	if r.null() {
		return true
	}
	s, ok := r.str()
	*dst = s
	return ok
}

// keep returns a pointer to a copy of v in *pool, which hands out many
// (one allocation per chunk instead of one per value). A full chunk is left
// as it is to the pointers into it: the next one is a new array.
func keep[T any](pool *[]T, v T) *T {
	if len(*pool) == cap(*pool) {
		*pool = make([]T, 0, max(16, cap(*pool)))
	}
	*pool = append(*pool, v)
	return &(*pool)[len(*pool)-1]
}

// strPtr reads an optional string: null sets nil. The string headers
// come from a slab, as FlexInts do.
func (r *jreader) strPtr(dst **string) bool {
	if r.null() {
		*dst = nil
		return true
	}
	s, ok := r.str()
	if !ok {
		return false
	}
	*dst = keep(&r.strs, s)
	return true
}

// int64 reads an integer literal without fraction or exponent.
func (r *jreader) int64() (int64, bool) {
	r.ws()
	i, neg := r.i, false
	if i < len(r.b) && r.b[i] == '-' {
		neg = true
		i++
	}
	start := i
	var u uint64
	for i < len(r.b) && r.b[i] >= '0' && r.b[i] <= '9' {
		if u > (1<<63)/10 {
			return 0, false
		}
		u = u*10 + uint64(r.b[i]-'0')
		i++
	}
	n := i - start
	if n == 0 || (n > 1 && r.b[start] == '0') {
		return 0, false
	}
	if i < len(r.b) {
		switch r.b[i] {
		case '.', 'e', 'E':
			return 0, false
		}
	}
	if (!neg && u > 1<<63-1) || (neg && u > 1<<63) {
		return 0, false
	}
	r.i = i
	if neg {
		return -int64(u), true
	}
	return int64(u), true
}

// digits parses an optional '-' and 1 to 18 decimal digits (no overflow possible).
func digits(s []byte) (int64, bool) {
	neg := len(s) > 0 && s[0] == '-'
	if neg {
		s = s[1:]
	}
	if len(s) == 0 || len(s) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}

// intInto reads an int64 field: null leaves it as it is.
func (r *jreader) intInto(dst *int64) bool {
	if r.null() {
		return true
	}
	v, ok := r.int64()
	*dst = v
	return ok
}

func (r *jreader) intIntoInt(dst *int) bool {
	var v int64 = int64(*dst)
	if !r.intInto(&v) {
		return false
	}
	*dst = int(v)
	return true
}

// intPtr reads an optional int64: null sets nil.
func (r *jreader) intPtr(dst **int64) bool {
	if r.null() {
		*dst = nil
		return true
	}
	v, ok := r.int64()
	if !ok {
		return false
	}
	*dst = &v
	return true
}

// flexPtr reads an optional survey.FlexInt: null sets nil; a string or an
// integral float goes through FlexInt's own UnmarshalJSON, as in encoding/json.
func (r *jreader) flexPtr(dst **survey.FlexInt) bool {
	if r.null() {
		*dst = nil
		return true
	}
	var v survey.FlexInt
	if r.peek() == '"' {
		start := r.i
		s, esc, ok := r.rawString()
		if !ok {
			return false
		}
		if n, ok := digits(s); ok && !esc {
			v = survey.FlexInt(n) // "5": what FlexInt.UnmarshalJSON gives, without its json.Unmarshal
		} else if v.UnmarshalJSON(r.b[start:r.i]) != nil {
			return false
		}
	} else {
		n, ok := r.int64()
		if !ok {
			return false
		}
		v = survey.FlexInt(n)
	}
	*dst = keep(&r.ints, v)
	return true
}

// guid reads a GUID string (no escapes) into *dst. A canonical lower-case
// one is used as it is (survey.ParseGUID would return the same value).
func (r *jreader) guid(dst *survey.GUID) bool {
	s, esc, ok := r.rawString()
	if !ok || esc {
		return false
	}
	if lowerGUID(s) {
		*dst = survey.GUID(r.substr(s))
		return true
	}
	g, err := survey.ParseGUID(r.substr(s))
	*dst = g
	return err == nil
}

func lowerGUID(s []byte) bool {
	if len(s) != 36 {
		return false
	}
	for i, c := range s {
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
			continue
		}
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// time reads a timestamp string (no escapes) into *dst.
func (r *jreader) time(dst *survey.Time) bool {
	s, esc, ok := r.rawString()
	if !ok || esc {
		return false
	}
	t, err := survey.ParseTime(r.substr(s))
	*dst = survey.Time{Time: t}
	return err == nil
}

// fields are the keys of one JSON object type, in the order the service
// writes them (it always does, leaving out absent ones). key checks the
// keys still ahead in that order against the input as written — `"name":`
// — before it scans anything: the usual key costs one short comparison,
// and the decoders switch on its index instead of comparing strings.
type fields struct {
	names []string
	keys  []fieldKey
}

// fieldKey is `"name":` as two little-endian words (zero-padded) with the
// masks of the bytes that count, compared with the input 16 bytes at a
// time; a longer one is also compared whole.
type fieldKey struct {
	w0, w1, m0, m1 uint64
	n              int
	long           string
}

func newFields(names ...string) *fields {
	f := &fields{names: names}
	for _, n := range names {
		q := `"` + n + `":`
		var b [16]byte
		copy(b[:], q)
		k := fieldKey{w0: binary.LittleEndian.Uint64(b[:8]), w1: binary.LittleEndian.Uint64(b[8:]), n: len(q)}
		k.m0, k.m1 = ^uint64(0), ^uint64(0)
		switch {
		case len(q) < 8:
			k.m0, k.m1 = 1<<(8*len(q))-1, 0
		case len(q) == 8:
			k.m1 = 0
		case len(q) < 16:
			k.m1 = 1<<(8*(len(q)-8)) - 1
		case len(q) > 16:
			k.long = q
		}
		f.keys = append(f.keys, k)
	}
	return f
}

// key reads the next key of an object: done at '}'. f is its index in fs,
// or -1 for a key fs does not have; next is the index where the search in
// written order starts (key advances it). A key with escapes, or one that
// matches a field only case-insensitively (encoding/json would use it),
// gives up.
func (r *jreader) key(fs *fields, first *bool, next *int) (f int, done, ok bool) {
	// Compact input (what the service sends) first: the separator right
	// here, then the key compared 16 bytes at a time.
	if b, i := r.b, r.i; i+17 <= len(b) {
		switch c := b[i]; {
		case c == '}':
			r.i = i + 1
			return 0, true, true
		case c == ',' && !*first:
			i++
		case c == '"' && *first:
		default:
			return r.keySlow(fs, first, next)
		}
		*first = false
		r.i = i
		x0, x1 := binary.LittleEndian.Uint64(b[i:]), binary.LittleEndian.Uint64(b[i+8:])
		for j := *next; j < len(fs.keys); j++ {
			k := &fs.keys[j]
			if x0&k.m0 == k.w0 && x1&k.m1 == k.w1 && (k.long == "" || len(b)-i >= k.n && string(b[i:i+k.n]) == k.long) {
				r.i = i + k.n
				*next = j + 1
				return j, false, true
			}
		}
		return r.keyName(fs, next)
	}
	return r.keySlow(fs, first, next)
}

// keySlow is key for input with white space, and near the end.
func (r *jreader) keySlow(fs *fields, first *bool, next *int) (f int, done, ok bool) {
	if r.consume('}') {
		return 0, true, true
	}
	if *first {
		*first = false
	} else if !r.consume(',') {
		return 0, false, false
	}
	r.ws()
	if rest := r.b[r.i:]; len(rest) >= 16 {
		x0, x1 := binary.LittleEndian.Uint64(rest), binary.LittleEndian.Uint64(rest[8:])
		for j := *next; j < len(fs.keys); j++ {
			k := &fs.keys[j]
			if x0&k.m0 == k.w0 && x1&k.m1 == k.w1 && (k.long == "" || len(rest) >= k.n && string(rest[:k.n]) == k.long) {
				r.i += k.n
				*next = j + 1
				return j, false, true
			}
		}
	}
	return r.keyName(fs, next)
}

// keyName reads a key that is not the one expected next and looks it up.
func (r *jreader) keyName(fs *fields, next *int) (f int, done, ok bool) {
	k, esc, ok := r.rawString()
	if !ok || esc || !r.consume(':') {
		return 0, false, false
	}
	for j, n := range fs.names {
		if string(k) == n {
			*next = j + 1
			return j, false, true
		}
	}
	for _, n := range fs.names {
		if bytes.EqualFold(k, []byte(n)) {
			return 0, false, false
		}
	}
	return -1, false, true
}

// elem advances to the next element of an array: done at ']'.
func (r *jreader) elem(first *bool) (done, ok bool) {
	if r.consume(']') {
		return true, true
	}
	if *first {
		*first = false
		return false, true
	}
	return false, r.consume(',')
}

// object reads an object of fs into t, calling field with the index of each
// known key once the reader is at its value; field reads the value and
// reports whether it could. Unknown keys are skipped.
func object[T any](r *jreader, t *T, fs *fields, field func(r *jreader, t *T, f int) bool) bool {
	if !r.consume('{') {
		return false
	}
	next := 0
	for first := true; ; {
		f, done, ok := r.key(fs, &first, &next)
		switch {
		case !ok || done:
			return ok
		case f < 0:
			if !r.skip(0) {
				return false
			}
		case !field(r, t, f):
			return false
		}
	}
}

// members is object for the envelope and its meta, whose decoded values and
// state live in field's closure (nothing for object to pass: a pointer
// handed to field would escape to the heap). A repeated key gives up (a
// repeated result would merge into the first one).
func (r *jreader) members(fs *fields, field func(f int) bool) bool {
	var seen uint32
	return object(r, (*struct{})(nil), fs, func(r *jreader, _ *struct{}, f int) bool {
		if seen&(1<<f) != 0 {
			return false
		}
		seen |= 1 << f
		return field(f)
	})
}

// objects reads an array of objects of fs into *dst: null sets nil, [] an
// empty non-nil slice (as encoding/json does). The elements are a run of s,
// each read by object with field. An element is complete before the next
// one is added (see slab.add): field must not add to s.
//
// Inside the result a repeated key is fine — the last value wins, as in
// encoding/json — except for a repeated non-empty array, which encoding/json
// merges element-wise into the first: the callers give up then.
func objects[T any](r *jreader, dst *[]T, s *slab[T], fs *fields, field func(r *jreader, t *T, f int) bool) bool {
	if r.null() {
		*dst = nil
		return true
	}
	if !r.consume('[') {
		return false
	}
	start := len(s.buf)
	for first := true; ; {
		done, ok := r.elem(&first)
		if !ok {
			return false
		}
		if done {
			*dst = s.run(start)
			return true
		}
		if !object(r, s.add(&start), fs, field) {
			return false
		}
	}
}

// skip validates and skips one value.
func (r *jreader) skip(depth int) bool {
	if depth > 200 {
		return false
	}
	switch r.peek() {
	case '{':
		r.i++
		first := true
		for {
			_, done, ok := r.keyAny(&first)
			if !ok {
				return false
			}
			if done {
				return true
			}
			if !r.skip(depth + 1) {
				return false
			}
		}
	case '[':
		r.i++
		first := true
		for {
			done, ok := r.elem(&first)
			if !ok {
				return false
			}
			if done {
				return true
			}
			if !r.skip(depth + 1) {
				return false
			}
		}
	case '"':
		_, _, ok := r.rawString()
		return ok
	case 't':
		return r.literal("true")
	case 'f':
		return r.literal("false")
	case 'n':
		return r.literal("null")
	default:
		return r.number()
	}
}

// keyAny is key for skipped objects: escaped keys are fine there.
func (r *jreader) keyAny(first *bool) (key []byte, done, ok bool) {
	if r.consume('}') {
		return nil, true, true
	}
	if *first {
		*first = false
	} else if !r.consume(',') {
		return nil, false, false
	}
	k, _, ok := r.rawString()
	if !ok || !r.consume(':') {
		return nil, false, false
	}
	return k, false, true
}

// number validates and skips a JSON number.
func (r *jreader) number() bool {
	b, i := r.b, r.i
	digits := func() int {
		s := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		return i - s
	}
	if i < len(b) && b[i] == '-' {
		i++
	}
	if i < len(b) && b[i] == '0' {
		i++
	} else if digits() == 0 {
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	r.i = i
	return true
}

// envelope walks {"meta": {...}, "result": ...}, calling result for the
// result value (not null). It returns the request id and whether a
// non-null result was seen.
func (r *jreader) envelope(result func(r *jreader) bool) (reqID string, has, ok bool) {
	var camel, snake string
	ok = r.members(envelopeFields, func(f int) bool {
		if f == 0 { // result
			has = !r.null()
			return !has || result(r)
		}
		return r.meta(&camel, &snake)
	})
	if !ok || !r.end() {
		return "", false, false
	}
	if camel != "" {
		return camel, has, true
	}
	return snake, has, true
}

func (r *jreader) meta(camel, snake *string) bool {
	if r.null() {
		return true
	}
	return r.members(metaFields, func(f int) bool {
		switch f {
		case 0:
			return r.strInto(snake)
		case 1:
			return r.strInto(camel)
		case 2, 3: // http_status, status_code
			return r.skip(0)
		default: // errors, message: typed in the generic decoder; rare on success
			return false
		}
	})
}

// fastResponse decodes a detail envelope. ok=false: use encoding/json.
// The decoded strings share one copy of body.
func fastResponse(body []byte) (resp *survey.Response, reqID string, ok bool) {
	return fastResult(newDetailReader(body, string(body)), responseFields, (*jreader).response)
}

// fastResponseDetached is fastResponse for a body the caller reuses once
// it returns (a pooled buffer): the strings are first decoded in place,
// sharing body, then copied together into one new allocation of exactly
// their size (detach), which is much smaller than the body (keys, numbers,
// punctuation and the envelope stay behind).
func fastResponseDetached(body []byte) (resp *survey.Response, reqID string, ok bool) {
	resp, reqID, ok = fastResult(newDetailReader(body, owned(body)), responseFields, (*jreader).response)
	if !ok {
		return nil, "", false
	}
	d := detacher{lo: uintptr(unsafe.Pointer(unsafe.SliceData(body)))}
	d.hi = d.lo + uintptr(len(body))
	d.walk(resp, &reqID)
	d.buf = make([]byte, 0, d.n)
	d.copying = true
	d.walk(resp, &reqID)
	return resp, reqID, true
}

// detacher moves the strings of a decoded response that point into the
// body [lo, hi) into one allocation: a first walk adds up their lengths, a
// second copies them. walk must visit every string of survey.Response:
// TestDetachVisitsEveryString fails when the type gains one it does not
// know, and FuzzFastDecode scribbles over the body after decoding.
type detacher struct {
	lo, hi  uintptr
	n       int
	copying bool
	buf     []byte
}

func (d *detacher) str(s *string) {
	if len(*s) == 0 {
		return
	}
	if p := uintptr(unsafe.Pointer(unsafe.StringData(*s))); p < d.lo || p >= d.hi {
		return // not in the body (unescaped, or lower-cased): already its own
	}
	if !d.copying {
		d.n += len(*s)
		return
	}
	start := len(d.buf)
	d.buf = append(d.buf, *s...) // within the capacity: d.buf never moves
	*s = unsafe.String(&d.buf[start], len(*s))
}

func (d *detacher) strPtr(s *string) {
	if s != nil {
		d.str(s)
	}
}

func (d *detacher) walk(resp *survey.Response, reqID *string) {
	d.str(reqID)
	if resp == nil {
		return
	}
	d.str((*string)(&resp.ResponseID))
	d.str(&resp.SurveyName)
	d.str(&resp.IPAddress)
	d.str(&resp.ResponseStatus)
	for i := range resp.URLParameters {
		p := &resp.URLParameters[i]
		d.str(&p.Name)
		d.str(&p.Value)
	}
	for i := range resp.Pages {
		qs := resp.Pages[i].Questions
		for j := range qs {
			q := &qs[j]
			d.str(&q.Type)
			d.str(&q.Title)
			d.str(&q.Variable)
			for k := range q.Answers {
				a := &q.Answers[k]
				d.strPtr(a.RowLabel)
				d.strPtr(a.ColumnLabel)
				d.strPtr(a.ChoiceLabel)
				d.strPtr(a.Text)
				d.strPtr((*string)(a.FileID))
			}
		}
	}
}

// fastResult decodes an envelope whose result is an object of fs read by field.
func fastResult[T any](r jreader, fs *fields, field func(r *jreader, t *T, f int) bool) (result *T, reqID string, ok bool) {
	var out T
	reqID, has, ok := r.envelope(func(r *jreader) bool { return object(r, &out, fs, field) })
	if !ok {
		return nil, "", false
	}
	if !has {
		return nil, reqID, true
	}
	return &out, reqID, true
}

// The keys of each object, in the order the service writes them; the
// decoders switch on the index.
var (
	envelopeFields = newFields("result", "meta")
	metaFields     = newFields("request_id", "requestId", "http_status", "status_code", "errors", "message")
	responseFields = newFields("response_id", "survey_id", "contact_id", "distribution_id", "survey_name", "ip_address",
		"date_created", "date_completed", "total_time", "response_status", "url_parameters", "pages")
	urlParamFields = newFields("name", "value")
	pageFields     = newFields("id", "questions")
	questionFields = newFields("id", "type", "title", "variable", "answers")
	answerFields   = newFields("row_id", "row_label", "column_id", "column_label", "choice_id", "choice_label",
		"other_id", "text", "value", "file_id")
	listFields = newFields("per_page", "page", "total", "data")
	refFields  = newFields("response_id", "href")
)

func (r *jreader) response(out *survey.Response, f int) bool {
	switch f {
	case 0: // response_id
		return r.guid(&out.ResponseID)
	case 1: // survey_id
		return r.intInto(&out.SurveyID)
	case 2: // contact_id
		return r.intPtr(&out.ContactID)
	case 3: // distribution_id
		return r.intPtr(&out.DistributionID)
	case 4: // survey_name
		return r.strInto(&out.SurveyName)
	case 5: // ip_address
		return r.strInto(&out.IPAddress)
	case 6: // date_created
		return r.null() || r.time(&out.DateCreated)
	case 7: // date_completed
		if r.null() {
			out.DateCompleted = nil
			return true
		}
		out.DateCompleted = new(survey.Time)
		return r.time(out.DateCompleted)
	case 8: // total_time
		return r.flexPtr(&out.TotalTime)
	case 9: // response_status
		return r.strInto(&out.ResponseStatus)
	case 10: // url_parameters
		s := slab[survey.URLParameter]{size: 4}
		return len(out.URLParameters) == 0 && objects(r, &out.URLParameters, &s, urlParamFields, (*jreader).urlParameter)
	default: // pages
		s := slab[survey.Page]{size: 8}
		return len(out.Pages) == 0 && objects(r, &out.Pages, &s, pageFields, (*jreader).page)
	}
}

func (r *jreader) urlParameter(p *survey.URLParameter, f int) bool {
	if f == 0 {
		return r.strInto(&p.Name)
	}
	return r.strInto(&p.Value)
}

func (r *jreader) page(p *survey.Page, f int) bool {
	if f == 0 {
		return r.intInto(&p.ID)
	}
	return len(p.Questions) == 0 && objects(r, &p.Questions, &r.qs, questionFields, (*jreader).question)
}

func (r *jreader) question(q *survey.Question, f int) bool {
	switch f {
	case 0:
		return r.intInto(&q.ID)
	case 1:
		return r.strInto(&q.Type)
	case 2:
		return r.strInto(&q.Title)
	case 3:
		return r.strInto(&q.Variable)
	default: // answers
		return len(q.Answers) == 0 && objects(r, &q.Answers, &r.as, answerFields, (*jreader).answer)
	}
}

func (r *jreader) answer(a *survey.Answer, f int) bool {
	switch f {
	case 0:
		return r.flexPtr(&a.RowID)
	case 1:
		return r.strPtr(&a.RowLabel)
	case 2:
		return r.flexPtr(&a.ColumnID)
	case 3:
		return r.strPtr(&a.ColumnLabel)
	case 4:
		return r.flexPtr(&a.ChoiceID)
	case 5:
		return r.strPtr(&a.ChoiceLabel)
	case 6:
		return r.flexPtr(&a.OtherID)
	case 7:
		return r.strPtr(&a.Text)
	case 8:
		return r.flexPtr(&a.Value)
	default: // file_id
		if r.null() {
			a.FileID = nil
			return true
		}
		a.FileID = new(survey.GUID)
		return r.guid(a.FileID)
	}
}

// fastList decodes a list envelope. ok=false: use encoding/json.
func fastList(body []byte) (list *survey.ResponseList, reqID string, ok bool) {
	return fastResult(newReader(body, string(body), 0, 0, 0, 0), listFields, (*jreader).list)
}

// fastListOwned is fastList for a body the caller gives up (see owned).
func fastListOwned(body []byte) (list *survey.ResponseList, reqID string, ok bool) {
	return fastResult(newReader(body, owned(body), 0, 0, 0, 0), listFields, (*jreader).list)
}

func (r *jreader) list(out *survey.ResponseList, f int) bool {
	switch f {
	case 0:
		return r.intIntoInt(&out.PerPage)
	case 1:
		return r.intIntoInt(&out.Page)
	case 2:
		return r.intIntoInt(&out.Total)
	default: // data
		s := slab[survey.ResponseRef]{size: 64}
		return len(out.Data) == 0 && objects(r, &out.Data, &s, refFields, (*jreader).ref)
	}
}

func (r *jreader) ref(ref *survey.ResponseRef, f int) bool {
	if f == 0 {
		return r.guid(&ref.ResponseID)
	}
	return r.strInto(&ref.Href)
}
