package pipeline

import (
	"encoding/json"
	"hash/fnv"
	"sync"

	"github.com/surveysync/surveysync/survey"
)

// contentCache remembers a content hash of the detail last written for a
// response, so re-reads of unchanged responses (overlaps, partial rescans)
// cost an API call but no write. It is bounded: when full it starts over,
// which costs at most one redundant write per response.
type contentCache struct {
	mu  sync.Mutex
	max int
	m   map[survey.GUID]uint64
}

func newContentCache(max int) *contentCache {
	return &contentCache{max: max, m: make(map[survey.GUID]uint64)}
}

// rejectedBit marks, in a stored hash, content that was rejected rather
// than written (hashes are compared without it).
const rejectedBit = 2

// same reports whether h is the hash last stored for id, and whether that
// content was rejected.
func (c *contentCache) same(id survey.GUID, h uint64) (same, rejected bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old, ok := c.m[id]
	return ok && old|rejectedBit == h|rejectedBit, ok && old&rejectedBit != 0
}

// put stores the hash of what was written for id, or rejected.
func (c *contentCache) put(id survey.GUID, h uint64, rejected bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= c.max {
		clear(c.m)
	}
	h &^= rejectedBit
	if rejected {
		h |= rejectedBit
	}
	c.m[id] = h
}

// contentHash hashes a detail's JSON encoding; never 0.
func contentHash(r *survey.Response) uint64 {
	b, err := json.Marshal(r)
	if err != nil {
		return 1
	}
	h := fnv.New64a()
	h.Write(b)
	h.Write([]byte(r.ContactIDHash)) // not in the JSON form
	return h.Sum64() | 1
}
