package clickhouse

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/surveysync/surveysync/pipeline"
	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/survey"
)

var (
	_ pipeline.RejectStore      = (*Sink)(nil)
	_ warehouse.RejectInventory = (*Sink)(nil)
)

// migrationDDL renders one migration as golden text.
func migrationDDL(t *testing.T, version int, d tmplData) string {
	t.Helper()
	ms, err := loadMigrations(migrationsFS)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Version != version {
			continue
		}
		ss, err := render(m, d)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(append([]string{"-- " + m.File}, ss...), "\n;\n") + "\n"
	}
	t.Fatalf("no migration %04d", version)
	return ""
}

func TestGoldenDDLRejects(t *testing.T) {
	checkGolden(t, "ddl_rejects_single.sql", migrationDDL(t, 45, newTmplData("surveysync", "", true)))
	got := migrationDDL(t, 45, newTmplData("surveysync", "warehouse", true))
	checkGolden(t, "ddl_rejects_cluster.sql", got)
	if !strings.Contains(got, "surveysync.rejects_local ON CLUSTER warehouse") ||
		!strings.Contains(got, "ENGINE = Distributed(warehouse, surveysync, rejects_local, cityHash64(response_id))") {
		t.Errorf("cluster DDL lacks rejects_local or its Distributed table:\n%s", got)
	}
}

func TestGoldenDDLRejectsListedStatus(t *testing.T) {
	if got := migrationDDL(t, 93, newTmplData("surveysync", "", true)); !strings.Contains(got,
		"ALTER TABLE surveysync.rejects ADD COLUMN listed_status String AFTER source") || strings.Contains(got, "Distributed") {
		t.Errorf("single-server DDL:\n%s", got)
	}
	got := migrationDDL(t, 93, newTmplData("surveysync", "warehouse", true))
	for _, want := range []string{
		"ALTER TABLE surveysync.rejects_local ON CLUSTER warehouse ADD COLUMN listed_status String AFTER source",
		"DROP TABLE IF EXISTS surveysync.rejects ON CLUSTER warehouse",
		"ENGINE = Distributed(warehouse, surveysync, rejects_local, cityHash64(response_id))",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("cluster DDL lacks %q:\n%s", want, got)
		}
	}
}

func TestWriteRejects(t *testing.T) {
	t.Run("single", func(t *testing.T) { testWriteRejects(t, nil, "rejects") })
	// A one-shard cluster: rejects is a Distributed table over rejects_local.
	t.Run("cluster", func(t *testing.T) {
		skipOnCluster(t)
		testWriteRejects(t, func(o *Options) { o.Cluster = "surveysync_local"; o.noOnClusterDDL = true }, "rejects_local")
	})
}

func testWriteRejects(t *testing.T, mod func(*Options), storage string) {
	s, _ := openTest(t, mod)
	ctx := ctxT(t)
	at := time.Date(2026, 11, 22, 4, 30, 1, 0, time.UTC)
	recs := []pipeline.Reject{
		{SurveyID: 4574, ResponseID: "da453b67-791e-4d4d-9009-75b1ed8a33c1", Stage: pipeline.StageFlatten, Reason: "date_out_of_range",
			Error: "flatten response da453b67-… of survey 4574: date_completed 2200-01-01T00:00:00Z is outside 1970-01-01..2106-02-07", Source: "poll", RejectedAt: at,
			ListedStatus: survey.StatusCompleted},
		// The id itself may be what is wrong: stored as it came.
		{SurveyID: 4574, ResponseID: "not-a-guid", Stage: pipeline.StageFetch, Reason: "decode", Error: "odpověď: špatný JSON", Source: "webhook", RejectedAt: at.Add(time.Second)},
	}
	if err := s.WriteRejects(ctx, recs); err != nil {
		t.Fatal(err)
	}
	// A retried write of the same record collapses in merges.
	if err := s.WriteRejects(ctx, recs[:1]); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteRejects(ctx, nil); err != nil {
		t.Fatal(err)
	}
	optimizeFinal(t, s, storage)
	rows, err := s.Conn().Query(ctx, "SELECT survey_id, response_id, stage, reason, error, source, listed_status, rejected_at FROM "+
		s.table("rejects")+" ORDER BY rejected_at")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []pipeline.Reject
	for rows.Next() {
		var r pipeline.Reject
		var rid string
		if err := rows.Scan(&r.SurveyID, &rid, &r.Stage, &r.Reason, &r.Error, &r.Source, &r.ListedStatus, &r.RejectedAt); err != nil {
			t.Fatal(err)
		}
		r.ResponseID = survey.GUID(rid)
		got = append(got, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("got %d rows, want 2: %+v", len(got), got)
	}
	for i := range got {
		got[i].RejectedAt = got[i].RejectedAt.UTC()
		if got[i] != recs[i] {
			t.Errorf("row %d = %+v, want %+v", i, got[i], recs[i])
		}
	}
}

func TestWriteRejectsCancelled(t *testing.T) {
	s, _ := openTest(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.WriteRejects(ctx, []pipeline.Reject{{SurveyID: 1, ResponseID: "x"}}); err == nil {
		t.Fatal("WriteRejects with a cancelled context succeeded")
	}
}
