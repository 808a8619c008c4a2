package blob

import (
	"context"
	"strings"
	"testing"

	"github.com/surveysync/surveysync/survey"
)

// DeleteResponse removes the response's objects and nothing else, and a
// second call finds nothing.
func TestDeleteResponse(t *testing.T) {
	st, _ := fileStore(t)
	ctx := context.Background()
	const rid = "da453b67-791e-4d4d-9009-75b1ed8a33c1"
	keys := []string{
		ref(1, rid, "00000000-0000-4000-8000-000000000001").Key(),
		ref(1, rid, "00000000-0000-4000-8000-000000000002").Key(),
		ref(1, "da453b67-791e-4d4d-9009-75b1ed8a33c2", "00000000-0000-4000-8000-000000000003").Key(),
		ref(2, rid, "00000000-0000-4000-8000-000000000004").Key(),
	}
	for _, k := range keys {
		if err := st.Put(ctx, k, strings.NewReader("x"), 1, Attributes{Size: 1, ContentType: "text/plain"}); err != nil {
			t.Fatal(err)
		}
	}
	n, err := st.DeleteResponse(ctx, 1, survey.GUID(rid))
	if err != nil || n != 2 {
		t.Fatalf("DeleteResponse = %d, %v; want 2", n, err)
	}
	if n, err := st.DeleteResponse(ctx, 1, survey.GUID(rid)); err != nil || n != 0 {
		t.Errorf("again = %d, %v; want 0", n, err)
	}
	for _, k := range keys[2:] {
		if objs, err := st.List(ctx, k); err != nil || len(objs) != 1 {
			t.Errorf("%s: %v, %v; want it kept", k, objs, err)
		}
	}
}
