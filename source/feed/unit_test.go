package feed

import (
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestScheduleWindowAcrossDST(t *testing.T) {
	w := Schedule{Policy: PolicyWindow, Window: Window{
		Days: []time.Weekday{time.Monday, time.Tuesday, time.Wednesday, time.Thursday, time.Friday},
		From: "09:00", To: "17:00", TimeZone: "Europe/Prague",
	}}
	utc := func(s string) time.Time {
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t2, _ := time.Parse("2006-01-02T15:04Z", s)
			return t2
		}
		return t
	}
	cases := []struct {
		name, now string
		want      string // "" = immediately
	}{
		// Spring: CET (+01) → CEST (+02) on Sunday 2026-03-29.
		{"friday evening before spring change", "2026-03-27T17:00:00Z", "2026-03-30T07:00:00Z"},
		{"friday inside window, winter time", "2026-03-27T08:00:00Z", ""},
		{"friday 07:30Z is 08:30 CET: before opening", "2026-03-27T07:30:00Z", "2026-03-27T08:00:00Z"},
		{"monday 07:30Z is 09:30 CEST: inside", "2026-03-30T07:30:00Z", ""},
		{"monday 06:30Z is 08:30 CEST: opens 07:00Z", "2026-03-30T06:30:00Z", "2026-03-30T07:00:00Z"},
		{"sunday of the change, during the skipped hour", "2026-03-29T01:30:00Z", "2026-03-30T07:00:00Z"},
		{"monday 15:30Z is 17:30 CEST: after closing", "2026-03-30T15:30:00Z", "2026-03-31T07:00:00Z"},
		// Autumn: CEST → CET on Sunday 2026-10-25.
		{"friday evening before autumn change", "2026-10-23T15:30:00Z", "2026-10-26T08:00:00Z"},
		{"saturday night of the change", "2026-10-25T00:30:00Z", "2026-10-26T08:00:00Z"},
		{"monday 07:30Z is 08:30 CET: before opening", "2026-10-26T07:30:00Z", "2026-10-26T08:00:00Z"},
		{"monday 15:30Z is 16:30 CET: inside", "2026-10-26T15:30:00Z", ""},
		{"friday 15:30Z is 17:30 CEST: after closing", "2026-10-23T15:30:00Z", "2026-10-26T08:00:00Z"},
		{"exactly at opening is inside", "2026-10-26T08:00:00Z", ""},
		{"exactly at closing is outside", "2026-10-26T16:00:00Z", "2026-10-27T08:00:00Z"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := w.next(utc(c.now))
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case c.want == "" && got != nil:
				t.Fatalf("now %s: want immediately, got %s", c.now, got.Format(time.RFC3339))
			case c.want != "" && got == nil:
				t.Fatalf("now %s: want %s, got immediately", c.now, c.want)
			case c.want != "" && !got.Equal(utc(c.want)):
				t.Fatalf("now %s: want %s, got %s", c.now, c.want, got.Format(time.RFC3339))
			}
		})
	}
}

func TestScheduleDelayAndErrors(t *testing.T) {
	now := time.Date(2026, 3, 28, 23, 0, 0, 0, time.UTC)
	got, err := Schedule{Policy: PolicyDelay, Delay: 6 * time.Hour}.next(now)
	if err != nil || !got.Equal(now.Add(6*time.Hour)) {
		t.Fatalf("delay: %v %v", got, err)
	}
	if got, err := (Schedule{}).next(now); got != nil || err != nil {
		t.Fatalf("immediate: %v %v", got, err)
	}
	for _, s := range []Schedule{
		{Policy: PolicyDelay},
		{Policy: "weekly"},
		{Policy: PolicyWindow, Window: Window{From: "17:00", To: "09:00"}},
		{Policy: PolicyWindow, Window: Window{From: "9", To: "17:00"}},
		{Policy: PolicyWindow, Window: Window{From: "09:00", To: "17:00", TimeZone: "Mars/Olympus"}},
	} {
		if _, err := s.next(now); err == nil {
			t.Errorf("%+v: want an error", s)
		}
	}
}

func TestMapRowValidation(t *testing.T) {
	o := Options{Name: "t", Type: TypeCSVDir, DistributionID: 7, Channel: ChannelEmail,
		Mapping: map[string]string{"email": "E-mail", "first_name": "Jméno", "last_name": "Příjmení",
			"import_number": "Import", "phone": "Tel", "user_field10": "UF10", "salutation_generate": "Osl"},
		Salutation: Salutation{Generate: true, PrefixMale: "Vážený pane", PrefixFemale: "Vážená paní", IncludeLastName: true},
		CSVDir:     CSVDirOptions{Dir: "x"}}
	o.setDefaults()
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	m := newMapper(&o)
	row := func(kv ...string) func(string) (string, bool) {
		mm := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			mm[kv[i]] = kv[i+1]
		}
		return func(c string) (string, bool) { v, ok := mm[c]; return v, ok }
	}
	c, key, p := m.mapRow(row("E-mail", " Jana@Example.cz ", "Jméno", "Jana", "Příjmení", "Nováková", "Import", "12", "UF10", "x"))
	if p != nil {
		t.Fatal(p)
	}
	if c.Email != "Jana@Example.cz" || *c.ImportNumber != 12 || c.UserField10 != "x" || !*c.SalutationGenerate ||
		c.SalutationPrefixFemale != "Vážená paní" || !*c.SalutationIncludeLastName || *c.SalutationIncludeFirstName {
		t.Fatalf("mapped %+v", c)
	}
	_, key2, _ := m.mapRow(row("E-mail", "jana@example.cz", "Jméno", "Jana", "Příjmení", "Nováková", "Import", "12", "UF10", "x"))
	if key != key2 || !strings.HasPrefix(key, "h:") {
		t.Fatalf("hash keys differ for the same contact: %s %s", key, key2)
	}
	bad := []struct {
		row   func(string) (string, bool)
		field string
	}{
		{row("E-mail", "jana@", "Jméno", "J", "Příjmení", "N"), "email"},
		{row("E-mail", "jana@example", "Jméno", "J", "Příjmení", "N"), "email"},
		{row("E-mail", "ja na@example.cz", "Jméno", "J", "Příjmení", "N"), "email"},
		{row("Jméno", "J", "Příjmení", "N", "Tel", "+420 777 123 456"), "email"},
		{row("E-mail", "a@b.cz", "Příjmení", "N"), "first_name"},
		{row("E-mail", "a@b.cz", "Jméno", "J"), "last_name"},
		{row("E-mail", "a@b.cz", "Jméno", "J", "Příjmení", "N", "Import", "12a"), "import_number"},
		{row("E-mail", "a@b.cz", "Jméno", "J", "Příjmení", "N", "Tel", "call me"), "phone"},
		{row("E-mail", "a@b.cz", "Jméno", "J", "Příjmení", "N", "Osl", "maybe"), "salutation_generate"},
		{row("E-mail", "a@b.cz", "Jméno", strings.Repeat("é", 101), "Příjmení", "N"), "first_name"},
		{row("E-mail", "a@b.cz", "Jméno", "J", "Příjmení", "N", "UF10", "\xff\xfe"), "user_field10"},
		{row(), ""},
	}
	for i, b := range bad {
		_, _, p := m.mapRow(b.row)
		if p == nil || p.Field != b.field {
			t.Errorf("case %d: want a problem on %q, got %v", i, b.field, p)
		}
	}
	// CATI: phone required, email not.
	o2 := o
	o2.Channel, o2.Salutation = ChannelCATI, Salutation{}
	m2 := newMapper(&o2)
	if _, _, p := m2.mapRow(row("Jméno", "J", "Tel", "+420 777 123 456")); p != nil {
		t.Fatal(p)
	}
	if _, _, p := m2.mapRow(row("E-mail", "a@b.cz")); p == nil || p.Field != "phone" {
		t.Fatalf("cati without phone: %v", p)
	}
	// Dedupe by column.
	o3 := o2
	o3.DedupeKey = "ID"
	m3 := newMapper(&o3)
	if _, k, p := m3.mapRow(row("ID", " 42 ", "Tel", "777123456")); p != nil || k != "42" {
		t.Fatalf("column key: %q %v", k, p)
	}
	if _, _, p := m3.mapRow(row("Tel", "777123456")); p == nil || p.Field != "ID" {
		t.Fatalf("empty key: %v", p)
	}
}

func TestOptionsValidate(t *testing.T) {
	good := Options{Name: "crm", Type: TypeHTTP, DistributionID: 1, Mapping: map[string]string{"email": "e"},
		HTTP: HTTPOptions{Path: "/feeds/crm", Token: "s"}}
	good.setDefaults()
	if err := good.validate(); err != nil {
		t.Fatal(err)
	}
	for i, mut := range []func(o *Options){
		func(o *Options) { o.Name = "a b" },
		func(o *Options) { o.DistributionID = 0 },
		func(o *Options) { o.Mapping = map[string]string{"emial": "e"} },
		func(o *Options) { o.Channel = "sms" },
		func(o *Options) { o.HTTP.Token = "" },
		func(o *Options) { o.Type = TypeCSVDir },
		func(o *Options) { o.Type = TypeClickHouseQuery },
		func(o *Options) { o.Type, o.CSVDir = TypeCSVDir, CSVDirOptions{Dir: "d", Delimiter: ";;"} },
		func(o *Options) { o.Send = SendOptions{MessageID: 3, Schedule: Schedule{Policy: PolicyWindow}} },
	} {
		o := good
		o.Mapping = map[string]string{"email": "e"}
		mut(&o)
		if err := o.validate(); err == nil {
			t.Errorf("mutation %d: want an error", i)
		}
	}
}

func TestCSVDelimiters(t *testing.T) {
	o := Options{Name: "t", Type: TypeCSVDir, DistributionID: 1, Mapping: map[string]string{"email": "mail", "company": "firma"},
		CSVDir: CSVDirOptions{Dir: "d"}}
	o.setDefaults()
	m := newMapper(&o)
	for _, c := range []struct{ delim, text string }{
		{"", "mail,firma\na@b.cz,\"X, s.r.o.\"\n"},
		{"", "\ufeffmail;firma\na@b.cz;\"X; s.r.o.\"\n"},
		{"\t", "mail\tfirma\na@b.cz\tX s.r.o.\n"},
		{";", "mail;firma\r\na@b.cz;X s.r.o.\r\n"},
	} {
		rows, err := csvRows(strings.NewReader(c.text), c.delim, DefaultMaxRecordBytes, m)
		if err != nil {
			t.Fatalf("%q: %v", c.text, err)
		}
		r, err := rows()
		if err != nil || r.problem != nil {
			t.Fatalf("%q: %v %v", c.text, err, r.problem)
		}
		if v, _ := r.get("mail"); v != "a@b.cz" {
			t.Errorf("%q: mail %q", c.text, v)
		}
		if v, _ := r.get("firma"); !strings.HasPrefix(v, "X") || r.line != 2 {
			t.Errorf("%q: firma %q line %d", c.text, v, r.line)
		}
	}
}

// endless is a reader of n bytes produced on the fly: a first chunk, then
// fill bytes; it counts what was read.
type endless struct {
	head []byte
	fill byte
	n    int64
	read int64
}

func (e *endless) Read(p []byte) (int, error) {
	if e.read >= e.n {
		return 0, io.EOF
	}
	if int64(len(p)) > e.n-e.read {
		p = p[:e.n-e.read]
	}
	for i := range p {
		if off := e.read + int64(i); off < int64(len(e.head)) {
			p[i] = e.head[off]
		} else {
			p[i] = e.fill
		}
	}
	e.read += int64(len(p))
	return len(p), nil
}

// TestCSVRecordCap: a CSV record up to the cap is read; one byte more
// fails the file naming the key; a quote left open before 2 GiB of data
// fails after reading about the cap (plus the read-ahead), not the 2 GiB,
// with memory bounded; an overlong header fails at once.
func TestCSVRecordCap(t *testing.T) {
	o := Options{Name: "t", Type: TypeCSVDir, DistributionID: 1, Mapping: map[string]string{"email": "mail", "company": "firma"},
		CSVDir: CSVDirOptions{Dir: "d"}}
	o.setDefaults()
	m := newMapper(&o)
	const limit = 4096
	header := "mail,firma\n"
	row := func(size int) string { // a record of size bytes, its newline included
		return "a@b.cz," + strings.Repeat("x", size-len("a@b.cz,")-1) + "\n"
	}
	readAll := func(r io.Reader, max int64) (rows int, err error) {
		next, err := csvRows(r, ",", max, m)
		if err != nil {
			return 0, err
		}
		for {
			r, err := next()
			if errors.Is(err, io.EOF) {
				return rows, nil
			}
			if err != nil {
				return rows, err
			}
			if r.problem != nil {
				return rows, errors.New(r.problem.Reason)
			}
			rows++
		}
	}
	if n, err := readAll(strings.NewReader(header+row(limit)+row(10)+row(limit)), limit); err != nil || n != 3 {
		t.Fatalf("records at the cap: %d rows, %v", n, err)
	}
	n, err := readAll(strings.NewReader(header+row(10)+row(limit+1)+row(10)), limit)
	var ur *errUnreadable
	if !errors.As(err, &ur) || n != 1 || !strings.Contains(err.Error(), "after line 2") || !strings.Contains(err.Error(), maxRecordKey) {
		t.Fatalf("a record one byte over the cap: %d rows, %v", n, err)
	}
	t.Log(err)
	if _, err := readAll(strings.NewReader(strings.Repeat("m", limit+1)+",firma\n"+row(10)), limit); !errors.As(err, &ur) || !strings.Contains(err.Error(), "the header") {
		t.Fatalf("an overlong header: %v", err)
	}

	// 2 GiB after an open quote, at the default cap.
	src := &endless{head: []byte(header + row(100) + "a@b.cz,\"never closed"), fill: 'y', n: 2 << 30}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	n, err = readAll(src, DefaultMaxRecordBytes)
	runtime.ReadMemStats(&after)
	if !errors.As(err, &ur) || n != 1 || !strings.Contains(err.Error(), "after line 2") {
		t.Fatalf("2 GiB in an open quote: %d rows, %v", n, err)
	}
	if src.read > DefaultMaxRecordBytes+2*readAhead {
		t.Fatalf("read %d bytes of the 2 GiB record, want at most the cap + read-ahead", src.read)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 32<<20 {
		t.Fatalf("allocated %d MiB refusing the record", alloc>>20)
	}
	t.Logf("read %d bytes, allocated %d KiB", src.read, (after.TotalAlloc-before.TotalAlloc)>>10)
}
