package feed

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/surveysync/surveysync/survey"
)

type fieldKind int

const (
	kindString fieldKind = iota
	kindEmail
	kindPhone
	kindInt
	kindBool
)

// fieldSpec describes one contact field of docs/api.md §2.1 and how a source value
// is checked and set. The spec gives no lengths; these limits are ours
// (docs/feeds.md "Validation").
type fieldSpec struct {
	kind   fieldKind
	maxLen int // in characters, for strings
	set    func(c *survey.Contact, s string, n int64, b bool)
	ptr    func(c *survey.Contact) *string // string fields
}

func str(f func(c *survey.Contact) *string, maxLen int, kind fieldKind) fieldSpec {
	return fieldSpec{kind: kind, maxLen: maxLen, ptr: f, set: func(c *survey.Contact, s string, _ int64, _ bool) { *f(c) = s }}
}

func flag(f func(c *survey.Contact) **bool) fieldSpec {
	return fieldSpec{kind: kindBool, set: func(c *survey.Contact, _ string, _ int64, b bool) { *f(c) = survey.Bool(b) }}
}

var contactFields = map[string]fieldSpec{
	"import_number":                 {kind: kindInt, set: func(c *survey.Contact, _ string, n int64, _ bool) { c.ImportNumber = survey.Int(n) }},
	"email":                         str(func(c *survey.Contact) *string { return &c.Email }, 254, kindEmail),
	"phone":                         str(func(c *survey.Contact) *string { return &c.Phone }, 32, kindPhone),
	"mobile":                        str(func(c *survey.Contact) *string { return &c.Mobile }, 32, kindPhone),
	"first_name":                    str(func(c *survey.Contact) *string { return &c.FirstName }, 100, kindString),
	"last_name":                     str(func(c *survey.Contact) *string { return &c.LastName }, 100, kindString),
	"salutation":                    str(func(c *survey.Contact) *string { return &c.Salutation }, 255, kindString),
	"company":                       str(func(c *survey.Contact) *string { return &c.Company }, 255, kindString),
	"department":                    str(func(c *survey.Contact) *string { return &c.Department }, 255, kindString),
	"job":                           str(func(c *survey.Contact) *string { return &c.Job }, 255, kindString),
	"user_field1":                   str(func(c *survey.Contact) *string { return &c.UserField1 }, 255, kindString),
	"user_field2":                   str(func(c *survey.Contact) *string { return &c.UserField2 }, 255, kindString),
	"user_field3":                   str(func(c *survey.Contact) *string { return &c.UserField3 }, 255, kindString),
	"user_field4":                   str(func(c *survey.Contact) *string { return &c.UserField4 }, 255, kindString),
	"user_field5":                   str(func(c *survey.Contact) *string { return &c.UserField5 }, 255, kindString),
	"user_field6":                   str(func(c *survey.Contact) *string { return &c.UserField6 }, 255, kindString),
	"user_field7":                   str(func(c *survey.Contact) *string { return &c.UserField7 }, 255, kindString),
	"user_field8":                   str(func(c *survey.Contact) *string { return &c.UserField8 }, 255, kindString),
	"user_field9":                   str(func(c *survey.Contact) *string { return &c.UserField9 }, 255, kindString),
	"user_field10":                  str(func(c *survey.Contact) *string { return &c.UserField10 }, 255, kindString),
	"salutation_prefix_male":        str(func(c *survey.Contact) *string { return &c.SalutationPrefixMale }, 100, kindString),
	"salutation_prefix_female":      str(func(c *survey.Contact) *string { return &c.SalutationPrefixFemale }, 100, kindString),
	"salutation_generate":           flag(func(c *survey.Contact) **bool { return &c.SalutationGenerate }),
	"salutation_include_first_name": flag(func(c *survey.Contact) **bool { return &c.SalutationIncludeFirstName }),
	"salutation_include_last_name":  flag(func(c *survey.Contact) **bool { return &c.SalutationIncludeLastName }),
}

// ContactFields lists the contact fields a Mapping may name, sorted.
func ContactFields() []string {
	out := make([]string, 0, len(contactFields))
	for f := range contactFields {
		out = append(out, f)
	}
	sort.Strings(out)
	return out
}

// rowProblem is why a row is rejected before any call.
type rowProblem struct {
	Field  string // contact field (or source column for the dedupe key); empty for the whole row
	Reason string
}

func (p *rowProblem) Error() string {
	if p.Field == "" {
		return p.Reason
	}
	return p.Field + ": " + p.Reason
}

// mapper turns source rows into validated contacts and keys.
type mapper struct {
	opts   *Options
	fields []mappedField // sorted by field name, for a stable hash
}

type mappedField struct {
	name, column string
	spec         fieldSpec
}

func newMapper(o *Options) *mapper {
	m := &mapper{opts: o}
	for f, col := range o.Mapping {
		m.fields = append(m.fields, mappedField{name: f, column: col, spec: contactFields[f]})
	}
	sort.Slice(m.fields, func(i, j int) bool { return m.fields[i].name < m.fields[j].name })
	return m
}

// mapRow maps and validates one source row. get returns a column's value.
// It returns the contact, its dedupe key, or the first problem.
func (m *mapper) mapRow(get func(col string) (string, bool)) (survey.Contact, string, *rowProblem) {
	var c survey.Contact
	o := m.opts
	if o.Salutation.Generate {
		c.SalutationGenerate = survey.Bool(true)
		c.SalutationPrefixMale = o.Salutation.PrefixMale
		c.SalutationPrefixFemale = o.Salutation.PrefixFemale
		c.SalutationIncludeFirstName = survey.Bool(o.Salutation.IncludeFirstName)
		c.SalutationIncludeLastName = survey.Bool(o.Salutation.IncludeLastName)
	}
	any := false
	for _, f := range m.fields {
		v, _ := get(f.column)
		v = strings.TrimSpace(v)
		if v == "" {
			continue
		}
		if !utf8.ValidString(v) {
			return c, "", &rowProblem{f.name, fmt.Sprintf("column %q is not valid UTF-8", f.column)}
		}
		any = true
		switch f.spec.kind {
		case kindInt:
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return c, "", &rowProblem{f.name, fmt.Sprintf("%q is not an integer", clip(v))}
			}
			f.spec.set(&c, "", n, false)
		case kindBool:
			b, ok := parseBool(v)
			if !ok {
				return c, "", &rowProblem{f.name, fmt.Sprintf("%q is not a boolean (true/false, 1/0, yes/no, ano/ne)", clip(v))}
			}
			f.spec.set(&c, "", 0, b)
		default:
			if n := utf8.RuneCountInString(v); n > f.spec.maxLen {
				return c, "", &rowProblem{f.name, fmt.Sprintf("%d characters, at most %d allowed", n, f.spec.maxLen)}
			}
			if strings.ContainsAny(v, "\x00\r\n") {
				return c, "", &rowProblem{f.name, "contains a line break or NUL"}
			}
			switch f.spec.kind {
			case kindEmail:
				if !validEmail(v) {
					return c, "", &rowProblem{f.name, fmt.Sprintf("%q is not a valid email address", clip(v))}
				}
			case kindPhone:
				if !validPhone(v) {
					return c, "", &rowProblem{f.name, fmt.Sprintf("%q is not a phone number (digits, spaces, + ( ) - / . only, at least 6 digits)", clip(v))}
				}
			}
			f.spec.set(&c, v, 0, false)
		}
	}
	if !any {
		return c, "", &rowProblem{"", "row is empty (no mapped column has a value)"}
	}
	switch o.Channel {
	case ChannelEmail:
		if c.Email == "" {
			return c, "", &rowProblem{"email", "required for an email channel"}
		}
	case ChannelCATI:
		if c.Phone == "" && c.Mobile == "" {
			return c, "", &rowProblem{"phone", "a phone or mobile number is required for a CATI channel"}
		}
	}
	if c.SalutationGenerate != nil && *c.SalutationGenerate {
		if c.FirstName == "" {
			return c, "", &rowProblem{"first_name", "required when salutation_generate is set"}
		}
		if c.LastName == "" {
			return c, "", &rowProblem{"last_name", "required when salutation_generate is set"}
		}
	}
	if o.DedupeKey != DedupeHash {
		k, _ := get(o.DedupeKey)
		k = strings.TrimSpace(k)
		if k == "" {
			return c, "", &rowProblem{o.DedupeKey, "dedupe key column is empty"}
		}
		if len(k) > 512 {
			return c, "", &rowProblem{o.DedupeKey, "dedupe key longer than 512 bytes"}
		}
		return c, k, nil
	}
	return c, m.hash(&c), nil
}

// hash keys a row by its mapped contact: every mapped field in name order,
// email in lower case. Two rows that would create the same contact get the
// same key.
func (m *mapper) hash(c *survey.Contact) string {
	h := sha256.New()
	var buf []byte
	for _, f := range m.fields {
		v := fieldValue(c, f.name, f.spec)
		if f.spec.kind == kindEmail {
			v = strings.ToLower(v)
		}
		buf = append(buf[:0], f.name...)
		buf = append(buf, '=')
		buf = append(buf, v...)
		buf = append(buf, 0)
		h.Write(buf)
	}
	return "h:" + hex.EncodeToString(h.Sum(nil)[:16])
}

func fieldValue(c *survey.Contact, name string, spec fieldSpec) string {
	switch name {
	case "import_number":
		if c.ImportNumber == nil {
			return ""
		}
		return strconv.FormatInt(int64(*c.ImportNumber), 10)
	case "salutation_generate":
		return boolText(c.SalutationGenerate)
	case "salutation_include_first_name":
		return boolText(c.SalutationIncludeFirstName)
	case "salutation_include_last_name":
		return boolText(c.SalutationIncludeLastName)
	}
	if spec.ptr != nil {
		return *spec.ptr(c)
	}
	return ""
}

func boolText(b *bool) string {
	if b == nil {
		return ""
	}
	return strconv.FormatBool(*b)
}

func parseBool(s string) (bool, bool) {
	switch strings.ToLower(s) {
	case "1", "true", "t", "yes", "y", "ano", "a":
		return true, true
	case "0", "false", "f", "no", "n", "ne":
		return false, true
	}
	return false, false
}

// validEmail checks the common syntax local@domain.tld: one '@', no spaces
// or control characters, a dotted domain of letters, digits and hyphens.
func validEmail(s string) bool {
	at := strings.LastIndexByte(s, '@')
	if at <= 0 || at == len(s)-1 || strings.Count(s, "@") != 1 {
		return false
	}
	local, domain := s[:at], s[at+1:]
	if len(local) > 64 || strings.HasPrefix(local, ".") || strings.HasSuffix(local, ".") || strings.Contains(local, "..") {
		return false
	}
	for _, r := range local {
		if r <= ' ' || r == 0x7f || strings.ContainsRune(`"(),:;<>[\]`, r) {
			return false
		}
	}
	labels := strings.Split(domain, ".")
	if len(labels) < 2 {
		return false
	}
	for _, l := range labels {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for _, r := range l {
			if !(r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r > 0x7f) {
				return false
			}
		}
	}
	return true
}

func validPhone(s string) bool {
	digits := 0
	for i, r := range s {
		switch {
		case r >= '0' && r <= '9':
			digits++
		case r == '+' && i == 0, r == ' ', r == '(', r == ')', r == '-', r == '/', r == '.':
		default:
			return false
		}
	}
	return digits >= 6 && digits <= 20
}

func clip(s string) string {
	if len(s) <= 60 {
		return s
	}
	i := 60
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}
