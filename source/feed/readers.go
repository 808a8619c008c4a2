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

// csvRows reads a CSV stream with a header line. delimiter "" detects ','
// or ';' from the header; otherwise it is the one-character delimiter. It reads one record at a time: memory does not
// grow with the file.
func csvRows(r io.Reader, delimiter string, m *mapper) (rowIter, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	if b, _ := br.Peek(3); bytes.Equal(b, bom) {
		_, _ = br.Discard(3) // Peek returned these 3 bytes: Discard cannot fail
	}
	comma := detectDelimiter(br)
	if d := []rune(delimiter); len(d) == 1 {
		comma = d[0]
	}
	cr := csv.NewReader(br)
	cr.Comma = comma
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	header, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return nil, unreadable("empty file: no header line")
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
			rec, err = cr.Read()
			if err == nil {
				line, _ := cr.FieldPos(0)
				if len(rec) == 1 && rec[0] == "" {
					continue // a blank line
				}
				if len(rec) != width {
					return sourceRow{line: int64(line), problem: &rowProblem{Reason: fmt.Sprintf("%d fields, the header has %d", len(rec), width)}}, nil
				}
				return sourceRow{line: int64(line), get: get}, nil
			}
			if errors.Is(err, io.EOF) {
				return sourceRow{}, io.EOF
			}
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				reason := pe.Err.Error()
				if pe.Line > pe.StartLine {
					reason += fmt.Sprintf(" (the quoted field runs to line %d)", pe.Line)
				}
				return sourceRow{line: int64(pe.StartLine), problem: &rowProblem{Reason: "malformed CSV: " + reason}}, nil
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
func jsonlRows(r io.Reader) rowIter {
	br := bufio.NewReaderSize(r, 64<<10)
	if b, _ := br.Peek(3); bytes.Equal(b, bom) {
		_, _ = br.Discard(3) // Peek returned these 3 bytes: Discard cannot fail
	}
	var line int64
	const maxLine = 1 << 20
	return func() (sourceRow, error) {
		for {
			b, err := readLine(br, maxLine)
			if len(b) == 0 && errors.Is(err, io.EOF) {
				return sourceRow{}, io.EOF
			}
			line++
			if errors.Is(err, errLineTooLong) {
				return sourceRow{line: line, problem: &rowProblem{Reason: fmt.Sprintf("line longer than %d bytes", maxLine)}}, nil
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
