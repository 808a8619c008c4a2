package parquet

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"

	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/survey"
)

// footerStats renders the min/max statistics of every column chunk of
// every Parquet file under dir.
func footerStats(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	for _, p := range parquetFiles(t, dir) {
		pf, err := file.OpenParquetFile(filepath.Join(dir, p), false)
		if err != nil {
			t.Fatal(err)
		}
		for rg := 0; rg < pf.NumRowGroups(); rg++ {
			md := pf.MetaData().RowGroup(rg)
			for c := 0; c < md.NumColumns(); c++ {
				cc, err := md.ColumnChunk(c)
				if err != nil {
					t.Fatal(err)
				}
				if st, err := cc.Statistics(); err == nil && st != nil && st.HasMinMax() {
					b.WriteString(string(st.EncodeMin()) + "\n" + string(st.EncodeMax()) + "\n")
				}
			}
		}
		pf.Close()
	}
	return b.String()
}

// TestEraseRowsRewritesFiles: the files holding an erased response are
// rewritten, so that no footer or page statistic keeps its values. What
// EraseRows removes is the warehouse suite's (TestWarehouseSuite/Erase).
func TestEraseRowsRewritesFiles(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	dir := t.TempDir()
	wh, err := OpenWarehouse(Options{Dir: dir, Allocator: mem})
	if err != nil {
		t.Fatal(err)
	}
	defer wh.Close()
	ctx := context.Background()
	b := buildBatch(t, mem, testItems(1))
	defer b.Release()
	if err := wh.Write(ctx, b); err != nil {
		t.Fatal(err)
	}
	// Response 11 (survey 3177) has the longest essay: the maximum of its
	// file's text statistics.
	erased := survey.GUID("0000000b-0000-4000-8000-00000000000b")
	longest := strings.Repeat("ž", 11)
	if !strings.Contains(footerStats(t, dir), longest) {
		t.Fatal("the test proves nothing: the essay is not in the statistics")
	}
	found, err := wh.Eraser().EraseRows(ctx, []warehouse.ResponseKey{{SurveyID: 3177, ResponseID: erased}})
	if err != nil {
		t.Fatal(err)
	}
	if found["responses"] != 1 || found["answers"] != 2 {
		t.Errorf("found %v, want 1 response, 2 answers", found)
	}
	if strings.Contains(footerStats(t, dir), longest) {
		t.Error("the rewritten file's statistics still hold the erased essay")
	}
	for _, table := range []string{"responses", "answers"} {
		for _, p := range parquetFiles(t, dir+"/"+table) {
			drop, _, err := wh.(*dirWarehouse).countEdit(ctx, filepath.Join(dir, table, p), []string{"response_id"}, eraseEdit(map[string]bool{string(erased): true}))
			if err != nil || drop != 0 {
				t.Errorf("%s: %d rows of the erased response left (%v)", p, drop, err)
			}
		}
	}
}
