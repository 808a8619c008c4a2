package sim

import (
	"encoding/binary"
	"strconv"
	"time"

	"github.com/surveysync/surveysync/survey"
)

// Deterministic generation. Every generated response is a pure function of
// (survey key, index): its header (dates, status, distribution) from one
// random stream, each question's answers from a stream of its own, so that a
// partial response shows exactly the answers its completed self will show.

// mix64 is the splitmix64 finaliser; it is a bijection on uint64.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

var (
	invM1 = mulInverse(0xbf58476d1ce4e5b9)
	invM2 = mulInverse(0x94d049bb133111eb)
)

// unmix64 inverts mix64.
func unmix64(x uint64) uint64 {
	x = unxorshr(x, 31)
	x *= invM2
	x = unxorshr(x, 27)
	x *= invM1
	x = unxorshr(x, 30)
	return x
}

func unxorshr(x uint64, s uint) uint64 {
	y := x
	for i := s; i < 64; i += s {
		y = x ^ (y >> s)
	}
	return y
}

// mulInverse returns the inverse of odd a modulo 2^64 (Newton's iteration).
func mulInverse(a uint64) uint64 {
	x := a
	for range 6 {
		x *= 2 - a*x
	}
	return x
}

// rng is a tiny splitmix64 stream: fast, deterministic, good enough for data.
type rng struct{ s uint64 }

func newRNG(parts ...uint64) rng {
	s := uint64(0x243f6a8885a308d3)
	for _, p := range parts {
		s = mix64(s ^ p + 0x9e3779b97f4a7c15)
	}
	return rng{s}
}

func (r *rng) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	return mix64(r.s)
}

// intn returns a value in [0, n); n > 0.
func (r *rng) intn(n int) int { return int(r.next() % uint64(n)) }

// int63n returns a value in [0, n); n > 0.
func (r *rng) int63n(n int64) int64 { return int64(r.next() % uint64(n)) }

// float returns a value in [0, 1).
func (r *rng) float() float64 { return float64(r.next()>>11) / (1 << 53) }

// guid16 is a GUID as bytes.
type guid16 [16]byte

const hexLower = "0123456789abcdef"
const hexUpper = "0123456789ABCDEF"

// appendGUID renders g in 8-4-4-4-12 form.
func appendGUID(dst []byte, g guid16, upper bool) []byte {
	h := hexLower
	if upper {
		h = hexUpper
	}
	for i, c := range g {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			dst = append(dst, '-')
		}
		dst = append(dst, h[c>>4], h[c&0x0f])
	}
	return dst
}

func (g guid16) String() string {
	var b [36]byte
	return string(appendGUID(b[:0], g, false))
}

// parseGUID16 parses a canonical GUID in either case.
func parseGUID16(s string) (guid16, bool) {
	var g guid16
	if len(s) != 36 {
		return g, false
	}
	j := 0
	for i := 0; i < 36; {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			if s[i] != '-' {
				return g, false
			}
			i++
			continue
		}
		hi, ok1 := unhex(s[i])
		lo, ok2 := unhex(s[i+1])
		if !ok1 || !ok2 {
			return g, false
		}
		g[j] = hi<<4 | lo
		j++
		i += 2
	}
	return g, true
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// randomGUID makes a version-4 GUID from two random words.
func randomGUID(a, b uint64) guid16 {
	var g guid16
	binary.BigEndian.PutUint64(g[0:8], a)
	binary.BigEndian.PutUint64(g[8:16], b)
	g[6] = 0x40 | g[6]&0x0f
	g[8] = 0x80 | g[8]&0x3f
	return g
}

// Positions of the 8 bytes that carry the (permuted) index of a generated
// response in its GUID; bytes 6 and 8 carry the version and variant.
var idxBytePos = [8]int{0, 1, 2, 3, 4, 5, 7, 9}

// baseGUID returns the GUID of generated response i. The index is encoded
// through a keyed bijection so that lookups need no table: decodeBase
// inverts it and checks the other bytes.
func (g *surveyGen) baseGUID(i int) guid16 {
	x := mix64(uint64(i)^g.key) ^ g.key2
	var out guid16
	for k, p := range idxBytePos {
		out[p] = byte(x >> (56 - 8*k))
	}
	r := mix64(x ^ g.key3)
	out[6] = 0x40 | byte(r)&0x0f
	out[8] = 0x80 | byte(r>>8)&0x3f
	binary.BigEndian.PutUint32(out[10:14], uint32(r>>16))
	out[14] = byte(r >> 48)
	out[15] = byte(r >> 56)
	return out
}

// decodeBase returns the index of a generated response from its GUID.
func (g *surveyGen) decodeBase(id guid16) (int, bool) {
	var x uint64
	for k, p := range idxBytePos {
		x |= uint64(id[p]) << (56 - 8*k)
	}
	i := unmix64(x^g.key2) ^ g.key
	if i >= uint64(g.n) {
		return 0, false
	}
	if g.baseGUID(int(i)) != id {
		return 0, false
	}
	return int(i), true
}

// Status codes of generated responses; the first four are also the list
// streams.
const (
	stCompleted uint8 = iota
	stDisqualified
	stQuotaFull
	stPartial
	stDeleted
	stNone = 255
)

var statusNames = [...]string{survey.StatusCompleted, survey.StatusDisqualified, survey.StatusQuotaFull, survey.StatusPartial, survey.StatusDeleted}

func statusCode(s string) uint8 {
	for i, n := range statusNames {
		if n == s {
			return uint8(i)
		}
	}
	return stNone
}

// Distribution kinds and their ids: survey id × 10 + kind.
const (
	distLink = iota + 1
	distEmail
	distCATI
	distKiosk
)

var distNames = [...]string{"", "link", "email", "cati", "kiosk"}

// DistributionID returns the id of a generated survey's distribution channel
// of the given type ("link", "email", "cati" or "kiosk"): surveyID*10 + 1..4.
func DistributionID(surveyID int64, kind string) int64 {
	for k, n := range distNames {
		if k > 0 && n == kind {
			return surveyID*10 + int64(k)
		}
	}
	return 0
}

// distKind returns the kind of a distribution id of a known survey.
func distKind(distributionID int64) int {
	k := int(distributionID % 10)
	if k >= distLink && k <= distKiosk {
		return k
	}
	return 0
}

const (
	maxShort = 2 * time.Hour  // longest ordinary filling time
	maxLate  = 48 * time.Hour // longest delay of a late-completing response
)

// header is the part of a generated response that lists need.
type header struct {
	created   int64 // unix ns, truncated to its precision
	completed int64 // unix ns; 0 when the final status is partial
	final     uint8
	late      bool
	dist      uint8
	stopPage  uint8 // pages answered by an abandoned partial
	totalTime int32
	contactID int64
}

// digitChoices are the numbers of fractional digits generated timestamps
// carry, as the service's vary (docs/api.md: 0 to 7).
var digitChoices = [8]int{0, 7, 7, 3, 0, 6, 7, 2}

var pow10 = [10]int64{1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000, 1000000000}

func truncDigits(ns int64, digits int) int64 {
	unit := pow10[9-digits]
	return ns - ns%unit
}

// header computes the header of generated response i.
func (g *surveyGen) header(i int) header {
	r := newRNG(g.key, uint64(i), 1)
	var h header
	c := g.start + int64(i)*g.interval + r.int63n(g.interval)
	h.created = truncDigits(c, digitChoices[r.intn(8)])
	u := r.float()
	switch {
	case u < g.cum[0]:
		h.final = stCompleted
	case u < g.cum[1]:
		h.final = stDisqualified
	case u < g.cum[2]:
		h.final = stQuotaFull
	default:
		h.final = stPartial
	}
	d := r.intn(100)
	switch {
	case d < 50:
		h.dist = distLink
	case d < 80:
		h.dist = distEmail
	case d < 90:
		h.dist = distCATI
	default:
		h.dist = distKiosk
	}
	if h.dist == distEmail || h.dist == distCATI {
		h.contactID = 4_000_000 + r.int63n(1_000_000)
	}
	late := r.float() < g.late
	dur := int64(60*time.Second) + r.int63n(int64(25*time.Minute)) + r.int63n(int64(15*time.Minute))
	active := dur
	if late {
		dur = int64(maxShort) + r.int63n(int64(maxLate-maxShort))
		active = int64(2*time.Minute) + r.int63n(int64(40*time.Minute))
	}
	digits := digitChoices[r.intn(8)]
	h.stopPage = uint8(1 + r.intn(max(len(g.q.pages)-1, 1)))
	if h.final != stPartial {
		h.late = late
		h.completed = truncDigits(c+dur, digits)
		h.totalTime = int32(active / int64(time.Second))
	}
	return h
}

// listTime is the time a response is ordered by in its list stream.
func (h *header) listTime() int64 {
	if h.final == stPartial {
		return h.created
	}
	return h.completed
}

// distributionID of a generated response.
func (g *surveyGen) distributionID(kind uint8) int64 { return g.id*10 + int64(kind) }

// build returns generated response i as it stands at now, and false when it
// does not exist yet. The answer values share immutable pointers with the
// questionnaire: callers outside the package get a deep copy.
func (g *surveyGen) build(i int, h header, now int64) survey.Response {
	id := g.baseGUID(i)
	status := h.final
	pages := len(g.q.pages)
	if status == stPartial {
		pages = int(h.stopPage)
	} else if h.completed > now {
		status, pages = stPartial, 1 // still being filled in
	}
	r := survey.Response{
		ResponseID:     survey.GUID(id.String()),
		SurveyID:       g.id,
		SurveyName:     g.name,
		DistributionID: ptr(g.distributionID(h.dist)),
		IPAddress:      ipAddress(g.key, i),
		DateCreated:    survey.Time{Time: time.Unix(0, h.created).UTC()},
		ResponseStatus: statusNames[status],
	}
	if h.contactID != 0 {
		r.ContactID = ptr(h.contactID)
	}
	if status != stPartial {
		r.DateCompleted = &survey.Time{Time: time.Unix(0, h.completed).UTC()}
		r.TotalTime = survey.Int(int64(h.totalTime))
	}
	ar := newRNG(g.key, uint64(i), 2)
	r.URLParameters, r.Pages = g.q.answer(ar.next(), id, pages, g.files)
	return r
}

func ptr[T any](v T) *T { return &v }

func ipAddress(key uint64, i int) string {
	r := newRNG(key, uint64(i), 3)
	x := r.next()
	if x%10 == 0 {
		return "2a00:1028:" + strconv.FormatUint(x>>8&0xffff, 16) + ":" + strconv.FormatUint(x>>24&0xffff, 16) + "::" + strconv.FormatUint(x>>40&0xffff, 16)
	}
	b := make([]byte, 0, 15)
	b = strconv.AppendUint(b, 77+x>>8%150, 10)
	b = append(b, '.')
	b = strconv.AppendUint(b, x>>16%256, 10)
	b = append(b, '.')
	b = strconv.AppendUint(b, x>>24%256, 10)
	b = append(b, '.')
	b = strconv.AppendUint(b, 1+x>>32%254, 10)
	return string(b)
}
