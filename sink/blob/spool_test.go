package blob

import (
	"os"
	"path/filepath"
	"testing"
)

// The temporary files of downloads a killed process left are removed; the
// folder's other files are not.
func TestRemoveSpoolLeftovers(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"surveysync-file-1.part", "surveysync-file-2.part", "other.txt"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("a respondent's upload"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	n, err := RemoveSpoolLeftovers(dir)
	if err != nil || n != 2 {
		t.Fatalf("removed %d, %v; want 2", n, err)
	}
	left, _ := filepath.Glob(filepath.Join(dir, "*"))
	if len(left) != 1 || filepath.Base(left[0]) != "other.txt" {
		t.Errorf("left: %v", left)
	}
	if n, err := RemoveSpoolLeftovers(filepath.Join(dir, "none")); err != nil || n != 0 {
		t.Errorf("a missing folder: %d, %v", n, err)
	}
}
