package clickhouse

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestClusterLayout builds the cluster layout (<t>_local + Distributed) on
// the one-shard cluster "surveysync_local" that scripts/clickhouse-up.sh
// declares, without ON CLUSTER (that needs ZooKeeper), and runs the view
// checks through the Distributed tables.
func TestClusterLayout(t *testing.T) {
	if testAddr() == "" {
		t.Skip("SURVEYSYNC_TEST_CLICKHOUSE_ADDR is not set")
	}
	probe, _ := openTest(t, nil)
	if countRows(t, probe, "SELECT count() FROM system.clusters WHERE cluster = 'surveysync_local'") == 0 {
		t.Skip("the server declares no cluster surveysync_local (start it with scripts/clickhouse-up.sh)")
	}
	s, _ := openTest(t, func(o *Options) {
		o.Cluster = "surveysync_local"
		o.noOnClusterDDL = true
	})
	var engine string
	if err := s.Conn().QueryRow(ctxT(t), "SELECT engine FROM system.tables WHERE database = '"+s.Database()+"' AND name = 'answers'").Scan(&engine); err != nil {
		t.Fatal(err)
	}
	if engine != "Distributed" {
		t.Fatalf("answers engine = %s, want Distributed", engine)
	}
	done := baseTime.Add(time.Hour)
	writeBatch(t, s, []testResponse{
		{ID: guid(1), SurveyID: 1, Version: 100, Completed: &done, Answers: 5},
		{ID: guid(2), SurveyID: 1, Version: 100, Completed: &done, Answers: 3},
	})
	for range 3 {
		writeBatch(t, s, []testResponse{{ID: guid(1), SurveyID: 1, Version: 200, Completed: &done, Answers: 2}})
	}
	writeBatch(t, s, []testResponse{{ID: guid(2), SurveyID: 1, Version: 300, Deleted: true}})
	if n := countRows(t, s, "SELECT count() FROM "+s.table("answers_local")); n != 14 {
		t.Errorf("answers_local has %d rows, want 14 (insert_distributed_sync)", n)
	}
	got := readAnswers(t, s)
	if len(got) != 2 || got[0].Version != 200 {
		t.Errorf("answers_current = %v, want the 2 answers of version 200", got)
	}
	if rs := readResponses(t, s); len(rs) != 1 || rs[0].Version != 200 {
		t.Errorf("responses_current = %+v", rs)
	}
}

func TestOptionsValidation(t *testing.T) {
	cases := []struct {
		o    Options
		want string
	}{
		{Options{}, "addr"},
		{Options{Addr: []string{"x:9000"}, Database: "bad-name"}, "database"},
		{Options{Addr: []string{"x:9000"}, Cluster: "a;DROP"}, "cluster"},
	}
	for _, c := range cases {
		err := c.o.setDefaults()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err = %v, want mention of %s", c.o, err, c.want)
		}
	}
	o := Options{Addr: []string{"x:9000"}}
	if err := o.setDefaults(); err != nil {
		t.Fatal(err)
	}
	if o.Database != "surveysync" || o.MaxRetries != 0 || o.DialTimeout != 10*time.Second || o.Logger == nil || o.Registerer == nil {
		t.Errorf("defaults: %+v", o)
	}
}

func TestPasswordNeverLogged(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	o := Options{Addr: []string{"127.0.0.1:1"}, Password: "s3cret-pw", Logger: log, DialTimeout: 200 * time.Millisecond, MaxRetries: -1}
	log.Info("options", "options", o)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := Open(ctx, o)
	if err == nil {
		t.Fatal("Open of a closed port succeeded")
	}
	if strings.Contains(buf.String(), "s3cret-pw") || strings.Contains(err.Error(), "s3cret-pw") {
		t.Errorf("password leaked: log %s, error %v", buf.String(), err)
	}
	if !strings.Contains(buf.String(), `"password":"***"`) {
		t.Errorf("log lacks the masked password: %s", buf.String())
	}
}
