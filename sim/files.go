package sim

import (
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/surveysync/surveysync/survey"
)

// Uploaded files. A file's bytes are a pure function of its id: a header
// that matches its type, then a ChaCha8 stream seeded by the id; they are
// streamed in chunks, never held whole. The name (non-ASCII, sent as RFC
// 5987 filename*) and type also derive from the id.

type fileKind struct {
	name, ascii, ctype string
	magic              []byte
}

var fileKinds = []fileKind{
	{"Přihláška – životopis.pdf", "Prihlaska - zivotopis.pdf", "application/pdf", []byte("%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")},
	{"fotografie účtenky.jpg", "fotografie uctenky.jpg", "image/jpeg", []byte{0xff, 0xd8, 0xff, 0xe0, 0x00, 0x10, 'J', 'F', 'I', 'F', 0x00}},
	{"Doporučení – Ing. Dvořák.docx", "Doporuceni - Ing. Dvorak.docx", "application/vnd.openxmlformats-officedocument.wordprocessingml.document", []byte("PK\x03\x04")},
}

func kindOf(fid guid16) *fileKind { return &fileKinds[int(fid[3])%len(fileKinds)] }

// fileReader returns the content of a file of size bytes.
func fileReader(fid guid16, size int64) io.Reader {
	var seed [32]byte
	copy(seed[:16], fid[:])
	binary.BigEndian.PutUint64(seed[16:], mix64(binary.BigEndian.Uint64(fid[:8])))
	binary.BigEndian.PutUint64(seed[24:], mix64(binary.BigEndian.Uint64(fid[8:])))
	magic := kindOf(fid).magic
	if int64(len(magic)) > size {
		magic = magic[:size]
	}
	return io.MultiReader(strings.NewReader(string(magic)), io.LimitReader(rand.NewChaCha8(seed), size-int64(len(magic))))
}

// FileInfo describes an uploaded file.
type FileInfo struct {
	ID          survey.GUID
	Name        string
	ContentType string
	Size        int64
}

// File returns an uploaded file of a response, as the download serves it,
// and a function opening its content (for tests: hashes, sizes).
func (s *Sim) File(surveyID int64, responseID, fileID survey.GUID) (FileInfo, func() io.Reader, bool) {
	rid, ok1 := parseGUID16(string(responseID))
	fid, ok2 := parseGUID16(string(fileID))
	if !ok1 || !ok2 {
		return FileInfo{}, nil, false
	}
	now := s.nowNS()
	s.mu.RLock()
	defer s.mu.RUnlock()
	sv, ok := s.survey(surveyID)
	if !ok {
		return FileInfo{}, nil, false
	}
	r, ok := sv.current(rid, now)
	if !ok || !hasFile(&r, fid) {
		return FileInfo{}, nil, false
	}
	k := kindOf(fid)
	size := sv.gen.fileSize
	if size <= 0 {
		size = 64 << 10
	}
	info := FileInfo{ID: survey.GUID(fid.String()), Name: k.name, ContentType: k.ctype, Size: size}
	return info, func() io.Reader { return fileReader(fid, size) }, true
}

// hasFile reports whether a response's upload answers name fid.
func hasFile(r *survey.Response, fid guid16) bool {
	for _, p := range r.Pages {
		for _, q := range p.Questions {
			if !isFileType(q.Type) {
				continue
			}
			for _, a := range q.Answers {
				if a.FileID != nil {
					if g, ok := parseGUID16(string(*a.FileID)); ok && g == fid {
						return true
					}
				}
				if a.Text != nil {
					if g, ok := parseGUID16(*a.Text); ok && g == fid {
						return true
					}
				}
			}
		}
	}
	return false
}

func (c *call) downloadFile(seg []string) {
	sid, ok := c.surveyID(seg[1])
	if !ok {
		return
	}
	info, open, ok := c.s.File(sid, survey.GUID(seg[3]), survey.GUID(seg[5]))
	if !ok {
		c.fail(http.StatusNotFound, "File not found")
		return
	}
	h := c.w.Header()
	h.Set("Content-Type", info.ContentType)
	h.Set("Content-Length", strconv.FormatInt(info.Size, 10))
	h.Set("Content-Disposition", contentDisposition(info.Name))
	c.w.WriteHeader(http.StatusOK)
	if c.r.Method == http.MethodHead {
		return
	}
	src := open()
	limit := info.Size
	if c.eff.reset {
		limit = info.Size / 2
	}
	buf := make([]byte, 32<<10)
	if _, err := io.CopyBuffer(c.w, io.LimitReader(src, limit), buf); err != nil {
		return
	}
	if c.eff.reset {
		if f, ok := c.w.(http.Flusher); ok {
			f.Flush()
		}
		c.reset()
	}
}

// contentDisposition renders an attachment header with an ASCII fallback
// name and the real name as RFC 5987 filename*.
func contentDisposition(name string) string {
	ascii := name
	for _, k := range fileKinds {
		if k.name == name {
			ascii = k.ascii
		}
	}
	return fmt.Sprintf(`attachment; filename="%s"; filename*=UTF-8''%s`, ascii, strings.ReplaceAll(url.PathEscape(name), "+", "%2B"))
}
