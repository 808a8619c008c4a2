package record_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLeaf keeps record a leaf (standard library only) and keeps the
// sources that alias its types from linking the pipeline, the warehouse
// contract or a database driver through it.
func TestLeaf(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != "github.com/surveysync/surveysync/record" {
		t.Errorf("record imports more than the standard library:\n%s", got)
	}
	out, err = exec.Command("go", "list", "-deps", "../source/feed", "../webhookrx").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.Contains(p, "clickhouse-go") || p == "github.com/surveysync/surveysync/pipeline" || p == "github.com/surveysync/surveysync/sink/warehouse" {
			t.Errorf("source/feed or webhookrx links %s", p)
		}
	}
}

// TestSourcesImportNoSink keeps the rooms apart: no package under source/
// (nor the emulator, nor the API's resource types) links a package under
// sink/; what they share with the warehouse is in record and survey.
func TestSourcesImportNoSink(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", "../source/...", "../sim", "../survey").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "github.com/surveysync/surveysync/sink/") {
			t.Errorf("a source links %s", p)
		}
	}
}
