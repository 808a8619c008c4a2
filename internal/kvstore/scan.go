package kvstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"strings"
)

// Scan reads a bbolt file on its own, with plain reads (no mmap, no
// bbolt), and checks every page the database can reach: a valid meta page,
// page ids and types as expected, pages inside the file and referenced
// once, element offsets inside their page, keys in order. bbolt trusts its
// file: a damaged page makes it panic (an assertion in Page.FastCheck, in
// a goroutine of its own when the free list is rebuilt at open, which no
// recover can catch) or read past the end of its mapping (SIGBUS). Scan
// is what to call before Open on a file that may be damaged (noise, a
// truncation, zeroed blocks).
//
// With collect set, the key/values of the pages that could be read are
// kept (Buckets): what can be salvaged from a damaged file.
func Scan(path string, collect bool) (*ScanResult, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	s := &scanner{f: f, size: fi.Size(), collect: collect, seen: map[uint64]bool{},
		res: &ScanResult{Buckets: map[string]*ScannedBucket{}}}
	s.run()
	return s.res, s.ioErr
}

// ScanResult is what Scan found.
type ScanResult struct {
	// Problems describe the damage, one line each; none when the file is
	// sound.
	Problems []string
	// Buckets are the top-level buckets found (nested ones as "a/b"), with
	// their entries when Scan was asked to collect.
	Buckets map[string]*ScannedBucket
	// Pages counts the pages read.
	Pages int
}

// Damaged reports whether Scan found any problem.
func (r *ScanResult) Damaged() bool { return len(r.Problems) > 0 }

// Summary is the first problems found, for a log line.
func (r *ScanResult) Summary() string {
	const show = 3
	p := r.Problems
	if len(p) > show {
		return strings.Join(p[:show], "; ") + fmt.Sprintf("; and %d more", len(p)-show)
	}
	return strings.Join(p, "; ")
}

// ScannedBucket is a bucket as Scan read it.
type ScannedBucket struct {
	Sequence uint64
	// Damaged is set when part of the bucket could not be read.
	Damaged bool
	Entries []KV
}

// KV is one key/value of a bucket.
type KV struct{ Key, Value []byte }

// The bbolt file format (go.etcd.io/bbolt/internal/common), in the
// machine's byte order (little-endian on every platform surveysync ships
// for).
const (
	pageHeaderSize  = 16 // id u64, flags u16, count u16, overflow u32
	elemSize        = 16 // branch: pos u32, ksize u32, pgid u64; leaf: flags u32, pos u32, ksize u32, vsize u32
	bucketHeader    = 16 // root pgid u64, sequence u64
	metaChecksumOff = 56 // the meta's bytes before its checksum
	flagBranch      = 0x01
	flagLeaf        = 0x02
	flagMeta        = 0x04
	flagFreelist    = 0x10
	leafBucketFlag  = 0x01
	boltMagic       = 0xED0CDAED
	boltVersion     = 2
	noFreelist      = ^uint64(0)
	maxScanDepth    = 64
)

var le = binary.LittleEndian

type meta struct {
	pageSize           uint32
	root, rootSeq      uint64
	freelist, hwm, txn uint64
}

type scanner struct {
	f       *os.File
	size    int64
	collect bool
	m       meta
	seen    map[uint64]bool
	res     *ScanResult
	ioErr   error
}

func (s *scanner) problem(format string, a ...any) {
	if len(s.res.Problems) < 1000 {
		s.res.Problems = append(s.res.Problems, fmt.Sprintf(format, a...))
	}
}

func (s *scanner) run() {
	m, ok := s.readMetas()
	if !ok {
		return
	}
	s.m = m
	if m.freelist != noFreelist {
		if _, fl, ok := s.page(m.freelist); ok && fl != flagFreelist {
			s.problem("page %d: type %#x, want the free list", m.freelist, fl)
		}
	}
	s.bucket("", m.root, m.rootSeq, nil, 0)
}

// readMetas returns the valid meta page with the highest transaction id,
// as bbolt chooses.
func (s *scanner) readMetas() (meta, bool) {
	var best meta
	found := false
	var errs []string
	try := func(off int64) (meta, error) {
		b := make([]byte, pageHeaderSize+metaChecksumOff+8)
		if _, err := s.f.ReadAt(b, off); err != nil {
			return meta{}, fmt.Errorf("cannot be read (%w)", err)
		}
		if le.Uint16(b[8:])&flagMeta == 0 {
			return meta{}, errors.New("is not a meta page")
		}
		mb := b[pageHeaderSize:]
		h := fnv.New64a()
		h.Write(mb[:metaChecksumOff])
		switch {
		case le.Uint32(mb) != boltMagic:
			return meta{}, errors.New("has no bbolt magic number")
		case le.Uint32(mb[4:]) != boltVersion:
			return meta{}, fmt.Errorf("has format version %d, want %d", le.Uint32(mb[4:]), boltVersion)
		case le.Uint64(mb[metaChecksumOff:]) != h.Sum64():
			return meta{}, errors.New("fails its checksum")
		}
		m := meta{pageSize: le.Uint32(mb[8:]), root: le.Uint64(mb[16:]), rootSeq: le.Uint64(mb[24:]),
			freelist: le.Uint64(mb[32:]), hwm: le.Uint64(mb[40:]), txn: le.Uint64(mb[48:])}
		if m.pageSize < 512 || m.pageSize > 1<<20 || m.pageSize&(m.pageSize-1) != 0 {
			return meta{}, fmt.Errorf("has a page size of %d", m.pageSize)
		}
		return m, nil
	}
	m0, err0 := try(0)
	offs := []int64{4096, 8192, 16384, 65536}
	if err0 == nil {
		offs = []int64{int64(m0.pageSize)}
		best, found = m0, true
	} else {
		errs = append(errs, "meta page 0 "+err0.Error())
	}
	var err1 error
	for _, off := range offs {
		var m1 meta
		if m1, err1 = try(off); err1 == nil {
			if !found || m1.txn > best.txn {
				best = m1
			}
			found = true
			break
		}
	}
	if err1 != nil {
		errs = append(errs, "meta page 1 "+err1.Error())
	}
	if !found {
		s.problem("no valid meta page: %s", strings.Join(errs, "; "))
		return meta{}, false
	}
	return best, true
}

// page reads page id (with its overflow pages) and checks its header; it
// returns the page's type.
func (s *scanner) page(id uint64) ([]byte, uint16, bool) {
	ps := int64(s.m.pageSize)
	if id < 2 || id >= s.m.hwm {
		s.problem("page %d: out of bounds (high water mark %d)", id, s.m.hwm)
		return nil, 0, false
	}
	if s.seen[id] {
		s.problem("page %d: referenced twice", id)
		return nil, 0, false
	}
	s.seen[id] = true
	off := int64(id) * ps
	if off+ps > s.size {
		s.problem("page %d: past the end of the file", id)
		return nil, 0, false
	}
	b := make([]byte, ps)
	if _, err := s.f.ReadAt(b, off); err != nil {
		s.ioErr = err
		return nil, 0, false
	}
	if got := le.Uint64(b); got != id {
		s.problem("page %d: holds the id %d", id, got)
		return nil, 0, false
	}
	fl := le.Uint16(b[8:])
	if fl != flagBranch && fl != flagLeaf && fl != flagFreelist {
		s.problem("page %d: invalid type %#x", id, fl)
		return nil, 0, false
	}
	if ov := uint64(le.Uint32(b[12:])); ov > 0 {
		if id+ov >= s.m.hwm || off+int64(ov+1)*ps > s.size {
			s.problem("page %d: %d overflow pages reach past the file", id, ov)
			return nil, 0, false
		}
		for i := uint64(1); i <= ov; i++ {
			if s.seen[id+i] {
				s.problem("page %d: referenced twice", id+i)
				return nil, 0, false
			}
			s.seen[id+i] = true
		}
		full := make([]byte, int64(ov+1)*ps)
		copy(full, b)
		if _, err := s.f.ReadAt(full[ps:], off+ps); err != nil && err != io.EOF {
			s.ioErr = err
			return nil, 0, false
		}
		b = full
	}
	s.res.Pages++
	return b, fl, true
}

// bucket walks the bucket named name whose root is page root (0: inline,
// in inline).
func (s *scanner) bucket(name string, root, seq uint64, inline []byte, depth int) {
	var sb *ScannedBucket
	if name != "" {
		sb = &ScannedBucket{Sequence: seq}
		s.res.Buckets[name] = sb
	}
	before := len(s.res.Problems)
	if root == 0 {
		if len(inline) < pageHeaderSize || le.Uint16(inline[8:]) != flagLeaf {
			s.problem("bucket %q: inline page unreadable", name)
		} else {
			s.elements(name, sb, inline, 0, nil, nil, depth)
		}
	} else {
		s.tree(name, sb, root, nil, nil, depth)
	}
	if sb != nil && len(s.res.Problems) > before {
		sb.Damaged = true
	}
}

// tree walks the pages under id; its keys must lie in [lo, hi) (nil: no
// bound).
func (s *scanner) tree(name string, sb *ScannedBucket, id uint64, lo, hi []byte, depth int) {
	if depth > maxScanDepth {
		s.problem("bucket %q: tree deeper than %d", name, maxScanDepth)
		return
	}
	b, fl, ok := s.page(id)
	switch {
	case !ok:
		return
	case fl == flagLeaf:
		s.elements(name, sb, b, id, lo, hi, depth)
		return
	case fl != flagBranch:
		s.problem("page %d: type %#x in the tree of bucket %q", id, fl, name)
		return
	}
	n := int(le.Uint16(b[10:]))
	if pageHeaderSize+n*elemSize > len(b) {
		s.problem("page %d: %d elements do not fit", id, n)
		return
	}
	var prev []byte
	type child struct {
		id uint64
		lo []byte
	}
	children := make([]child, 0, n)
	for i := 0; i < n; i++ {
		e := pageHeaderSize + i*elemSize
		pos, ks := int(le.Uint32(b[e:])), int(le.Uint32(b[e+4:]))
		start := e + pos
		if pos <= 0 || start+ks > len(b) {
			s.problem("page %d: element %d reaches past the page", id, i)
			return
		}
		k := b[start : start+ks]
		if (prev != nil && bytes.Compare(prev, k) >= 0) || (lo != nil && bytes.Compare(k, lo) < 0) || (hi != nil && bytes.Compare(k, hi) >= 0) {
			s.problem("page %d: keys out of order", id)
			return
		}
		prev = k
		children = append(children, child{id: le.Uint64(b[e+8:]), lo: k})
	}
	for i := range children {
		chi := hi
		if i+1 < n {
			chi = children[i+1].lo
		}
		clo := children[i].lo
		if i == 0 {
			clo = lo
		}
		s.tree(name, sb, children[i].id, clo, chi, depth+1)
	}
}

// elements reads the key/values of a leaf page.
func (s *scanner) elements(name string, sb *ScannedBucket, b []byte, id uint64, lo, hi []byte, depth int) {
	n := int(le.Uint16(b[10:]))
	if pageHeaderSize+n*elemSize > len(b) {
		s.problem("page %d of bucket %q: %d elements do not fit", id, name, n)
		return
	}
	var prev []byte
	for i := 0; i < n; i++ {
		e := pageHeaderSize + i*elemSize
		flags, pos := le.Uint32(b[e:]), int(le.Uint32(b[e+4:]))
		ks, vs := int(le.Uint32(b[e+8:])), int(le.Uint32(b[e+12:]))
		start := e + pos
		if pos <= 0 || ks < 0 || vs < 0 || start+ks+vs > len(b) || start+ks+vs < start {
			s.problem("page %d of bucket %q: element %d reaches past the page", id, name, i)
			return
		}
		k, v := b[start:start+ks], b[start+ks:start+ks+vs]
		if (prev != nil && bytes.Compare(prev, k) >= 0) || (lo != nil && bytes.Compare(k, lo) < 0) || (hi != nil && bytes.Compare(k, hi) >= 0) {
			s.problem("page %d of bucket %q: keys out of order", id, name)
			return
		}
		prev = k
		if flags&leafBucketFlag != 0 {
			if len(v) < bucketHeader {
				s.problem("page %d: bucket %q has a header of %d bytes", id, k, len(v))
				continue
			}
			child := string(k)
			if name != "" {
				child = name + "/" + child
			}
			s.bucket(child, le.Uint64(v), le.Uint64(v[8:]), v[bucketHeader:], depth+1)
			continue
		}
		if sb == nil {
			continue // a key/value outside any bucket: bbolt has none
		}
		if s.collect {
			sb.Entries = append(sb.Entries, KV{Key: bytes.Clone(k), Value: bytes.Clone(v)})
		}
	}
}
