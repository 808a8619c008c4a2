package surveyapi

import "testing"

// TestNullShortCut checks null's inlined short cut against the long way
// for every first byte, with and without white space before it.
func TestNullShortCut(t *testing.T) {
	bodies := []string{"", " ", "nul", " nul"}
	for c := range 256 {
		bodies = append(bodies, string([]byte{byte(c)})+"ull", " "+string([]byte{byte(c)})+"ull")
	}
	for _, body := range bodies {
		r, ref := jreader{b: []byte(body)}, jreader{b: []byte(body)}
		got, want := r.null(), ref.nullAhead()
		if got != want || r.i != ref.i {
			t.Errorf("null(%q) = %v at %d, the long way %v at %d", body, got, r.i, want, ref.i)
		}
	}
	if r := (jreader{b: []byte(" null")}); !r.null() || r.i != 5 {
		t.Errorf("null(%q) = false or at %d", " null", r.i)
	}
}
