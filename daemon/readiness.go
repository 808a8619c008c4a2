package daemon

import (
	"fmt"

	"github.com/surveysync/surveysync/pipeline"
)

// writesReady is the readiness of the pipeline's writes: not ready while a
// batch is held because the sink fails or refuses it (a full or read-only
// Parquet folder, ClickHouse refusing the rows), even when a ping of the
// sink succeeds. The pipeline retries the held batch by itself (within
// its back-off, at most sync's RetryMax or RefusedRetryMax), so readiness
// returns without any new traffic once the cause is gone.
func writesReady(writes func() pipeline.WriteStatus) error {
	if writes == nil {
		return nil
	}
	st := writes()
	if !st.Failing {
		return nil
	}
	where := ""
	if st.Table != "" {
		where = " to " + st.Table
	}
	code := ""
	if st.Code != 0 {
		code = fmt.Sprintf("code %d: ", st.Code)
	}
	return fmt.Errorf("sink writes%s failing (%s, %d attempts; the batch is held and retried): %s%s", where, st.Class, st.Attempts, code, st.Message)
}
