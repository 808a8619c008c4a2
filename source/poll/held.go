package poll

import (
	"encoding/hex"
	"hash/fnv"
	"sync"

	"github.com/surveysync/surveysync/survey"
)

// held remembers, for recently seen responses, the status at which they are
// durably in the sink, so that re-listing them (the overlap of the next
// windows, a partial stream's cycles, reconcile) costs no detail call when
// nothing changed.
//
// It learns from three places: the poller's own acknowledged refs (the
// status of the list that showed them), the pipeline's written responses
// (Poller.Observe, which the daemon wires to the pipeline's OnResponse, so
// responses that came by webhook count too), and the sink's inventory
// (Inventory.CurrentResponses, and RejectInventory.RejectedResponses for
// the responses rejected and not written since) read at a survey's first
// cycle and at every reconcile, so a restart does not re-read the overlap
// nor an unchanged rejected response.
//
// Memory is bounded: two generations of at most max/2 entries each (about
// 20 bytes an entry: a 16-byte key, a status byte and the map's overhead;
// each generation's table grows as it fills). When the young generation is full it becomes the old one and
// the previous old one is dropped; a hit in the old generation moves the
// entry to the young one. What is forgotten is only re-read (one detail
// call), never lost.
type held struct {
	mu       sync.Mutex
	half     int
	young    map[heldKey]uint8
	old      map[heldKey]uint8
	disabled bool
}

// heldKey is a response id mixed with its survey id by a pseudo-random
// mask: 16 bytes and a status byte per slot, half the size of a struct key
// (two ids collide only if they differ by exactly the masks' difference,
// about 2^-122 for any pair).
type heldKey [16]byte

func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// Status codes; 0 means unknown.
const (
	hsPartial uint8 = iota + 1
	hsCompleted
	hsDisqualified
	hsQuotaFull
	hsDeleted
)

// hsRejected flags a response the pipeline rejected when it was listed at
// the status beside it: it is not in the warehouse, and reconcile must not
// read it again while it is listed so (issue 19).
const hsRejected uint8 = 0x80

func statusCode(s string) uint8 {
	switch s {
	case survey.StatusPartial:
		return hsPartial
	case survey.StatusCompleted:
		return hsCompleted
	case survey.StatusDisqualified:
		return hsDisqualified
	case survey.StatusQuotaFull:
		return hsQuotaFull
	case survey.StatusDeleted:
		return hsDeleted
	}
	return 0
}

// sameStatus reports whether a response held at status h is unchanged when
// a list of stream shows it. The service lists a quota-full response under
// quotafull but its detail says disqualified: that is the same response,
// not a change.
func sameStatus(stream string, h uint8) bool {
	h &^= hsRejected
	switch stream {
	case survey.StatusQuotaFull:
		return h == hsQuotaFull || h == hsDisqualified
	case survey.StatusDisqualified:
		// A detail written as quotafull (the emulator's spelling) listed
		// under disqualified would be a real change; only the detail's
		// disqualified matches.
		return h == hsDisqualified
	default:
		return h != 0 && h == statusCode(stream)
	}
}

func newHeld(max int) *held {
	if max <= 0 {
		return &held{disabled: true}
	}
	// The maps grow as responses are seen: a small survey does not pay
	// for a generation of max/2 entries up front (6 MB at the default).
	return &held{half: max/2 + 1, young: map[heldKey]uint8{}, old: map[heldKey]uint8{}}
}

func keyOf(surveyID int64, id survey.GUID) heldKey {
	var k heldKey
	s := string(id)
	parsed := false
	if len(s) == 36 && s[8] == '-' && s[13] == '-' && s[18] == '-' && s[23] == '-' {
		var buf [32]byte
		n := copy(buf[:], s[0:8])
		n += copy(buf[n:], s[9:13])
		n += copy(buf[n:], s[14:18])
		n += copy(buf[n:], s[19:23])
		copy(buf[n:], s[24:36])
		_, err := hex.Decode(k[:], buf[:])
		parsed = err == nil
	}
	if !parsed {
		h := fnv.New128a()
		h.Write([]byte(s))
		h.Sum(k[:0])
	}
	a, b := mix64(uint64(surveyID)), mix64(uint64(surveyID)^0x9e3779b97f4a7c15)
	for i := range 8 {
		k[i] ^= byte(a >> (8 * i))
		k[8+i] ^= byte(b >> (8 * i))
	}
	return k
}

// get returns the held status of a response (0: unknown).
func (h *held) get(surveyID int64, id survey.GUID) uint8 {
	if h.disabled {
		return 0
	}
	k := keyOf(surveyID, id)
	h.mu.Lock()
	defer h.mu.Unlock()
	if st, ok := h.young[k]; ok {
		return st
	}
	if st, ok := h.old[k]; ok {
		delete(h.old, k)
		h.putLocked(k, st)
		return st
	}
	return 0
}

// put records that a response is in the sink at status.
func (h *held) put(surveyID int64, id survey.GUID, status string) {
	h.record(surveyID, id, status, 0, false)
}

// putRejected records that a response listed at status was rejected.
func (h *held) putRejected(surveyID int64, id survey.GUID, status string) {
	h.record(surveyID, id, status, hsRejected, false)
}

// seedRejected records that a response listed at status was rejected,
// unless the set already knows the response: what this process learnt is
// as new as the reject records it is seeded from, or newer (issue 19).
func (h *held) seedRejected(surveyID int64, id survey.GUID, status string) {
	h.record(surveyID, id, status, hsRejected, true)
}

// record holds a response at status with flags; keepKnown leaves one the
// set already knows as it is.
func (h *held) record(surveyID int64, id survey.GUID, status string, flags uint8, keepKnown bool) {
	st := statusCode(status)
	if h.disabled || st == 0 {
		return
	}
	k := keyOf(surveyID, id)
	h.mu.Lock()
	defer h.mu.Unlock()
	if keepKnown {
		if _, ok := h.young[k]; ok {
			return
		}
		if _, ok := h.old[k]; ok {
			return
		}
	} else {
		delete(h.old, k)
	}
	h.putLocked(k, st|flags)
}

func (h *held) putLocked(k heldKey, st uint8) {
	if _, ok := h.young[k]; !ok && len(h.young) >= h.half {
		h.old = h.young
		h.young = map[heldKey]uint8{}
	}
	h.young[k] = st
}
