package sim

import (
	"bytes"
	"slices"
	"sort"
	"time"

	"github.com/surveysync/surveysync/survey"
)

// Lists. Each survey keeps, per stream (completed, disqualified, quotafull,
// partial), the ids of its responses sorted by (list time, response id):
// list time is date_completed, or date_created for the partial stream. An id
// below n is a generated response (4 bytes each, built on first use), an id
// at or above n an entry of extras. Visibility at Now is a prefix of each
// array. Generated responses that are still being filled in (created <=
// Now < completed) are found by a bounded scan and merged into the partial
// stream.

// ensureBuilt builds the sorted stream arrays. Caller holds s.mu for writing.
func (sv *survState) ensureBuilt() {
	if sv.built {
		return
	}
	g := sv.gen
	type kt struct {
		t  int64
		id int32
	}
	var tmp [4][]kt
	for i := range g.n {
		if _, over := sv.baseOver[int32(i)]; over {
			continue
		}
		h := g.header(i)
		if h.late {
			sv.delayed = append(sv.delayed, int32(i))
		}
		tmp[h.final] = append(tmp[h.final], kt{h.listTime(), int32(i)})
	}
	for st := range tmp {
		a := tmp[st]
		slices.SortFunc(a, func(x, y kt) int {
			if x.t != y.t {
				if x.t < y.t {
					return -1
				}
				return 1
			}
			gx, gy := g.baseGUID(int(x.id)), g.baseGUID(int(y.id))
			return bytes.Compare(gx[:], gy[:])
		})
		ids := make([]int32, len(a))
		for k, e := range a {
			ids[k] = e.id
		}
		sv.lists[st] = ids
	}
	sv.built = true
}

// key returns the list time and GUID of id.
func (sv *survState) key(id int32) (int64, guid16) {
	if int(id) < sv.gen.n {
		h := sv.gen.header(int(id))
		return h.listTime(), sv.gen.baseGUID(int(id))
	}
	e := sv.extras[int(id)-sv.gen.n]
	return e.t, e.id
}

func cmpKey(ta int64, ga guid16, tb int64, gb guid16) int {
	switch {
	case ta < tb:
		return -1
	case ta > tb:
		return 1
	}
	return bytes.Compare(ga[:], gb[:])
}

// listTimeOf returns the time id is ordered by (cheaper than key).
func (sv *survState) listTimeOf(id int32) int64 {
	if int(id) < sv.gen.n {
		h := sv.gen.header(int(id))
		return h.listTime()
	}
	return sv.extras[int(id)-sv.gen.n].t
}

// searchTime returns the first position in a whose list time is >= t
// (strict=false) or > t (strict=true).
func (sv *survState) searchTime(a []int32, t int64, strict bool) int {
	return sort.Search(len(a), func(k int) bool {
		x := sv.listTimeOf(a[k])
		if strict {
			return x > t
		}
		return x >= t
	})
}

// insertID inserts id into stream st at its sorted position.
func (sv *survState) insertID(st uint8, id int32) {
	a := sv.lists[st]
	t, g := sv.key(id)
	pos := sort.Search(len(a), func(k int) bool {
		tk, gk := sv.key(a[k])
		return cmpKey(tk, gk, t, g) >= 0
	})
	sv.lists[st] = slices.Insert(a, pos, id)
}

// removeID removes id from stream st.
func (sv *survState) removeID(st uint8, id int32) {
	a := sv.lists[st]
	t := sv.listTimeOf(id)
	for k := sv.searchTime(a, t, false); k < len(a); k++ {
		if a[k] == id {
			sv.lists[st] = slices.Delete(a, k, k+1)
			return
		}
		if sv.listTimeOf(a[k]) != t {
			return
		}
	}
}

// listQuery is a parsed list request.
type listQuery struct {
	status                      uint8
	page, perPage               int
	startStarted, endStarted    int64 // 0 = none; inclusive bounds
	startCompleted, endComplete int64
	hasSS, hasES, hasSC, hasEC  bool
}

// list returns the ids matching q at now, in order. The slice may alias the
// stream array: use it before releasing the lock. Caller holds s.mu (read
// or write) and has built the arrays.
func (sv *survState) list(q *listQuery, now int64) []int32 {
	a := sv.lists[q.status]
	if q.status == stPartial {
		lo, hi := 0, sv.searchTime(a, now, true)
		if q.hasSS {
			lo = sv.searchTime(a[:hi], q.startStarted, false)
		}
		if q.hasES {
			hi = max(lo, sv.searchTime(a[:hi], q.endStarted, true))
		}
		a = a[lo:hi]
		if sv.endedAt != 0 {
			a = sv.filter(a, func(id int32) bool { return int(id) >= sv.gen.n || sv.createdOf(id) <= sv.endedAt })
		}
		return sv.mergeInProgress(a, q, now)
	}
	hi := sv.searchTime(a, now, true)
	lo := 0
	if q.hasSC {
		lo = sv.searchTime(a[:hi], q.startCompleted, false)
	}
	if q.hasEC {
		hi = max(lo, sv.searchTime(a[:hi], q.endComplete, true))
	}
	a = a[lo:hi]
	if q.hasSS || q.hasES || sv.endedAt != 0 {
		a = sv.filter(a, func(id int32) bool {
			c := sv.createdOf(id)
			if q.hasSS && c < q.startStarted || q.hasES && c > q.endStarted {
				return false
			}
			return sv.endedAt == 0 || int(id) >= sv.gen.n || c <= sv.endedAt
		})
	}
	return a
}

func (sv *survState) filter(a []int32, keep func(int32) bool) []int32 {
	var out []int32
	for _, id := range a {
		if keep(id) {
			out = append(out, id)
		}
	}
	return out
}

func (sv *survState) createdOf(id int32) int64 {
	if int(id) < sv.gen.n {
		return sv.gen.header(int(id)).created
	}
	return sv.extras[int(id)-sv.gen.n].resp.DateCreated.UnixNano()
}

// ipItem is an in-progress generated response with its sort key.
type ipItem struct {
	created int64
	guid    guid16
	id      int32
}

// inProgress returns the generated responses being filled in at now
// (created <= now < completed), not overridden, in list order.
func (sv *survState) inProgress(q *listQuery, now int64) []ipItem {
	g := sv.gen
	if g.n == 0 {
		return nil
	}
	var out []ipItem
	take := func(i int, h *header) {
		if h.final == stPartial || h.created > now || h.completed <= now || !sv.exists(h, now) {
			return
		}
		if q.hasSS && h.created < q.startStarted || q.hasES && h.created > q.endStarted {
			return
		}
		if _, over := sv.baseOver[int32(i)]; over {
			return
		}
		out = append(out, ipItem{h.created, g.baseGUID(i), int32(i)})
	}
	// Ordinary ones started within maxShort (+1 s of truncation) of now.
	from := (now - int64(maxShort) - int64(time.Second) - g.start) / g.interval
	to := (now-g.start)/g.interval + 1
	for i := max(from-1, 0); i <= to && i < int64(g.n); i++ {
		h := g.header(int(i))
		if !h.late {
			take(int(i), &h)
		}
	}
	// Late ones started within maxLate.
	first := (now - int64(maxLate) - int64(time.Second) - g.start) / g.interval
	k, _ := slices.BinarySearch(sv.delayed, int32(max(first-1, 0)))
	for ; k < len(sv.delayed); k++ {
		i := int(sv.delayed[k])
		if int64(i) > to {
			break
		}
		h := g.header(i)
		take(i, &h)
	}
	slices.SortFunc(out, func(a, b ipItem) int { return cmpKey(a.created, a.guid, b.created, b.guid) })
	return out
}

// mergeInProgress merges the in-progress generated responses into the
// partial stream a (both sorted by created, then id).
func (sv *survState) mergeInProgress(a []int32, q *listQuery, now int64) []int32 {
	ip := sv.inProgress(q, now)
	if len(ip) == 0 {
		return a
	}
	out := make([]int32, 0, len(a)+len(ip))
	rest := a
	for _, it := range ip {
		pos := sort.Search(len(rest), func(k int) bool {
			tk := sv.listTimeOf(rest[k])
			if tk != it.created {
				return tk > it.created
			}
			gk := sv.guidOf(rest[k])
			return bytes.Compare(gk[:], it.guid[:]) >= 0
		})
		out = append(out, rest[:pos]...)
		out = append(out, it.id)
		rest = rest[pos:]
	}
	return append(out, rest...)
}

// pageBounds returns the slice bounds of page (1-based) of size perPage in
// a list of total items, without overflowing for absurd page numbers.
func pageBounds(page, perPage, total int) (int, int) {
	if page-1 >= (total+perPage-1)/perPage {
		return total, total
	}
	from := (page - 1) * perPage
	return from, min(from+perPage, total)
}

// guidOf returns the GUID of a list id.
func (sv *survState) guidOf(id int32) guid16 {
	if int(id) < sv.gen.n {
		return sv.gen.baseGUID(int(id))
	}
	return sv.extras[int(id)-sv.gen.n].id
}

// lookup finds a response by id at now. It returns the stored entry (which
// may be purged) or the generated index. Caller holds s.mu.
func (sv *survState) lookup(id guid16, now int64) (e *entry, idx int, h header, ok bool) {
	if slot, found := sv.byGUID[id]; found {
		e := sv.extras[slot]
		return e, -1, header{}, true
	}
	i, found := sv.gen.decodeBase(id)
	if !found {
		return nil, -1, header{}, false
	}
	h = sv.gen.header(i)
	if !sv.exists(&h, now) {
		return nil, -1, header{}, false
	}
	return nil, i, h, true
}

// current returns the current detail of a response (shared pointers: do
// not hand out without deepCopy) and whether it exists (purged or unknown:
// false). Caller holds s.mu.
func (sv *survState) current(id guid16, now int64) (survey.Response, bool) {
	e, i, h, ok := sv.lookup(id, now)
	if !ok {
		return survey.Response{}, false
	}
	if e != nil {
		if e.purged || e.resp.DateCreated.UnixNano() > now {
			return survey.Response{}, false
		}
		return e.resp, true
	}
	return sv.gen.build(i, h, now), true
}

// store records r as the current detail of its id (adding or overriding),
// and moves it between streams. Caller holds s.mu for writing.
func (sv *survState) store(id guid16, r survey.Response, base int, purged bool) *entry {
	sv.ensureBuilt()
	if sv.byGUID == nil {
		sv.byGUID = map[guid16]int32{}
		sv.baseOver = map[int32]int32{}
	}
	n := int32(sv.gen.n)
	slot, found := sv.byGUID[id]
	var e *entry
	if found {
		e = sv.extras[slot]
		if e.list != stNone {
			sv.removeID(e.list, n+slot)
		}
	} else {
		e = &entry{id: id, base: int32(base)}
		slot = int32(len(sv.extras))
		sv.extras = append(sv.extras, e)
		sv.byGUID[id] = slot
		if base >= 0 {
			h := sv.gen.header(base)
			sv.removeID(h.final, int32(base))
			sv.baseOver[int32(base)] = slot
		}
	}
	e.resp, e.purged = r, purged
	e.list = stNone
	if !purged {
		st := statusCode(r.ResponseStatus)
		if st < stDeleted {
			e.list = st
			e.t = r.DateCreated.UnixNano()
			if st != stPartial && r.DateCompleted != nil {
				e.t = r.DateCompleted.UnixNano()
			}
			sv.insertID(st, n+slot)
		}
	}
	return e
}
