package feed

import (
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
		rows, err := csvRows(strings.NewReader(c.text), c.delim, m)
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
