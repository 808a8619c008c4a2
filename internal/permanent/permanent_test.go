package permanent

import (
	"errors"
	"fmt"
	"testing"
)

func TestPermanent(t *testing.T) {
	base := errors.New("bad date")
	err := fmt.Errorf("get response: %w", New("bad_date", base))
	if !Is(err) || Reason(err) != "bad_date" || !errors.Is(err, base) {
		t.Fatalf("wrapped permanent error lost: %v", err)
	}
	if Is(base) || Reason(base) != "" || Is(nil) || New("x", nil) != nil {
		t.Fatal("non-permanent errors reported permanent")
	}
	if got := Errorf("decode", "field %s", "x").Error(); got != "field x" {
		t.Fatalf("Errorf text = %q", got)
	}
}
