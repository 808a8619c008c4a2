package testkit_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoProductionImport keeps the harnesses out of the product: no
// package outside internal/testkit imports one in its non-test files (a
// test file may).
func TestNoProductionImport(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	const kit = "github.com/surveysync/surveysync/internal/testkit"
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", "../../...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] == kit || strings.HasPrefix(f[0], kit+"/") {
			continue
		}
		for _, imp := range f[1:] {
			if imp == kit || strings.HasPrefix(imp, kit+"/") {
				t.Errorf("%s imports the test harness %s outside its tests", f[0], imp)
			}
		}
	}
}
