package feed

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

var bom = []byte{0xEF, 0xBB, 0xBF}

// errUnreadable marks a file that cannot be read at all (it goes to failed/).
type errUnreadable struct{ msg string }

func (e *errUnreadable) Error() string { return e.msg }

func unreadable(format string, a ...any) error {
	return &errUnreadable{fmt.Sprintf(format, a...)}
}

// readAhead is the size of the buffer the readers read a file through.
const readAhead = 64 << 10

// errRecordTooLong is returned by recordLimit past its limit.
var errRecordTooLong = errors.New("record too long")

// recordLimit reads r up to limit bytes in all, then fails with
// errRecordTooLong: csvRows moves the limit past each record it reads, so
// one record (a quote left open swallows the rest of the file into one)
// cannot make encoding/csv buffer more than the cap plus the read-ahead.
type recordLimit struct {
	r     io.Reader
	read  int64 // bytes returned so far
	limit int64
}

func (l *recordLimit) Read(p []byte) (int, error) {
	room := l.limit - l.read
	if room <= 0 {
		return 0, errRecordTooLong
	}
	if int64(len(p)) > room {
		p = p[:room]
	}
	n, err := l.r.Read(p)
	l.read += int64(n)
	return n, err
}

// maxRecordKey is the configuration key of the cap, for messages.
const maxRecordKey = "feeds[].csv_dir.max_record_bytes"

// csvRows reads a CSV stream with a header line. delimiter "" detects ','
// or ';' from the header; otherwise it is the one-character delimiter. It
// reads one record at a time: memory does not grow with the file. A record
// (the header included) longer than maxRecord bytes fails the file
// (errUnreadable) without being read further: past a quote left open
// there is no telling where the next record starts.
func csvRows(r io.Reader, delimiter string, maxRecord int64, m *mapper) (rowIter, error) {
	lim := &recordLimit{r: r, limit: maxRecord + readAhead}
	br := bufio.NewReaderSize(lim, readAhead) // encoding/csv reads through br itself: no second buffer
	var skipped int64                         // the BOM
	if b, _ := br.Peek(3); bytes.Equal(b, bom) {
		_, _ = br.Discard(3) // Peek returned these 3 bytes: Discard cannot fail
		skipped = 3
	}
	comma := detectDelimiter(br)
	if d := []rune(delimiter); len(d) == 1 {
		comma = d[0]
	}
	cr := csv.NewReader(br)
	cr.Comma = comma
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	var start, line int64 // the current record's first byte; the line of the last record read
	tooLong := func() error {
		where := "the header"
		if line > 0 {
			where = fmt.Sprintf("the record after line %d", line)
		}
		return unreadable("%s (from byte %d) is longer than %d bytes (%s): a quote left open, or a field that large; "+
			"rows before it were processed, nothing after it. Fix the file and drop it again (pushed rows are skipped), or raise %s",
			where, start, maxRecord, maxRecordKey, maxRecordKey)
	}
	// next reads a record and moves the limit past it; a record over the
	// cap, whether the limit stopped it or it ended just past the cap, is
	// errRecordTooLong.
	next := func() ([]string, error) {
		rec, err := cr.Read()
		if errors.Is(err, errRecordTooLong) {
			return nil, err
		}
		end := skipped + cr.InputOffset()
		if end-start > maxRecord && !errors.Is(err, io.EOF) {
			return nil, errRecordTooLong
		}
		start, lim.limit = end, end+maxRecord+readAhead
		return rec, err
	}
	header, err := next()
	if errors.Is(err, io.EOF) {
		return nil, unreadable("empty file: no header line")
	}
	if errors.Is(err, errRecordTooLong) {
		return nil, tooLong()
	}
	if err != nil {
		return nil, unreadable("header: %v", err)
	}
	index := make(map[string]int, len(header))
	for i, h := range header {
		h = strings.TrimSpace(h)
		if !utf8.ValidString(h) {
			return nil, unreadable("header column %d is not valid UTF-8 (files must be UTF-8)", i+1)
		}
		if _, dup := index[h]; dup && h != "" {
			return nil, unreadable("header names column %q twice", h)
		}
		index[h] = i
	}
	if err := m.checkColumns(func(col string) bool { _, ok := index[col]; return ok }); err != nil {
		return nil, err
	}
	width := len(header)
	var rec []string
	get := func(col string) (string, bool) {
		i, ok := index[col]
		if !ok || i >= len(rec) {
			return "", false
		}
		return rec[i], true
	}
	return func() (sourceRow, error) {
		for {
			var err error
			rec, err = next()
			if err == nil {
				l, _ := cr.FieldPos(0)
				line = int64(l)
				if len(rec) == 1 && rec[0] == "" {
					continue // a blank line
				}
				if len(rec) != width {
					return sourceRow{line: line, problem: &rowProblem{Reason: fmt.Sprintf("%d fields, the header has %d", len(rec), width)}}, nil
				}
				return sourceRow{line: line, get: get}, nil
			}
			if errors.Is(err, io.EOF) {
				return sourceRow{}, io.EOF
			}
			if errors.Is(err, errRecordTooLong) {
				return sourceRow{}, tooLong()
			}
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				line = int64(pe.StartLine)
				reason := pe.Err.Error()
				if pe.Line > pe.StartLine {
					reason += fmt.Sprintf(" (the quoted field runs to line %d)", pe.Line)
				}
				return sourceRow{line: line, problem: &rowProblem{Reason: "malformed CSV: " + reason}}, nil
			}
			return sourceRow{}, fmt.Errorf("read: %w", err)
		}
	}, nil
}

// detectDelimiter counts ',' and ';' outside quotes in the first line.
func detectDelimiter(br *bufio.Reader) rune {
	b, _ := br.Peek(64 << 10)
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		b = b[:i]
	}
	commas, semis, quoted := 0, 0, false
	for _, c := range b {
		switch c {
		case '"':
			quoted = !quoted
		case ',':
			if !quoted {
				commas++
			}
		case ';':
			if !quoted {
				semis++
			}
		}
	}
	if semis > commas {
		return ';'
	}
	return ','
}

// jsonlRows reads one JSON object per line, keyed by source column names.
// Values may be strings, numbers, booleans or null.
func jsonlRows(r io.Reader, maxLine int64) rowIter {
	br := bufio.NewReaderSize(r, readAhead)
	if b, _ := br.Peek(3); bytes.Equal(b, bom) {
		_, _ = br.Discard(3) // Peek returned these 3 bytes: Discard cannot fail
	}
	var line int64
	return func() (sourceRow, error) {
		for {
			b, err := readLine(br, int(maxLine))
			if len(b) == 0 && errors.Is(err, io.EOF) {
				return sourceRow{}, io.EOF
			}
			line++
			if errors.Is(err, errLineTooLong) {
				return sourceRow{line: line, problem: &rowProblem{Reason: fmt.Sprintf("line longer than %d bytes (%s)", maxLine, maxRecordKey)}}, nil
			}
			if err != nil && !errors.Is(err, io.EOF) {
				return sourceRow{}, fmt.Errorf("read: %w", err)
			}
			b = bytes.TrimSpace(b)
			if len(b) == 0 {
				continue
			}
			obj, perr := jsonObject(b)
			if perr != nil {
				return sourceRow{line: line, problem: perr}, nil
			}
			return sourceRow{line: line, get: mapGetter(obj)}, nil
		}
	}
}

var errLineTooLong = errors.New("line too long")

// readLine returns the next line without its newline; a line longer than
// max is consumed and reported as errLineTooLong.
func readLine(br *bufio.Reader, max int) ([]byte, error) {
	var out []byte
	for {
		frag, err := br.ReadSlice('\n')
		if len(out)+len(frag) > max {
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = br.ReadSlice('\n')
			}
			return []byte{'x'}, errLineTooLong
		}
		out = append(out, frag...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return bytes.TrimSuffix(out, []byte{'\n'}), err
	}
}

func mapGetter(obj map[string]string) func(string) (string, bool) {
	return func(col string) (string, bool) { v, ok := obj[col]; return v, ok }
}

// jsonObject decodes one JSON object of scalar values into strings.
func jsonObject(b []byte) (map[string]string, *rowProblem) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var raw map[string]any
	if err := dec.Decode(&raw); err != nil {
		return nil, &rowProblem{Reason: "not a JSON object: " + err.Error()}
	}
	if dec.More() {
		return nil, &rowProblem{Reason: "more than one JSON value on the line"}
	}
	return scalarStrings(raw)
}

func scalarStrings(raw map[string]any) (map[string]string, *rowProblem) {
	out := make(map[string]string, len(raw))
	for k, v := range raw {
		switch v := v.(type) {
		case nil:
			out[k] = ""
		case string:
			out[k] = v
		case json.Number:
			out[k] = v.String()
		case float64:
			out[k] = strconv.FormatFloat(v, 'f', -1, 64)
		case bool:
			out[k] = strconv.FormatBool(v)
		default:
			return nil, &rowProblem{Field: k, Reason: "value is an object or array, want a string, number or boolean"}
		}
	}
	return out, nil
}

// checkColumns fails a source whose header lacks the dedupe column or every
// mapped column: each of its rows would be rejected.
func (m *mapper) checkColumns(has func(string) bool) error {
	if k := m.opts.DedupeKey; k != DedupeHash && !has(k) {
		return unreadable("header lacks the dedupe key column %q", k)
	}
	for _, f := range m.fields {
		if has(f.column) {
			return nil
		}
	}
	cols := make([]string, 0, len(m.fields))
	for _, f := range m.fields {
		cols = append(cols, strconv.Quote(f.column))
	}
	return unreadable("header has none of the mapped columns (%s)", strings.Join(cols, ", "))
}
