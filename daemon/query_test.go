package daemon

import (
	"context"
	"reflect"
	"testing"

	"github.com/surveysync/surveysync/pipeline"
	"github.com/surveysync/surveysync/sink/parquet"
	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/survey"
)

// countingWarehouse has sync states for surveys 2 and 1, a name for 1, and
// an inventory of current responses.
type countingWarehouse struct {
	warehouse.Warehouse
	inv warehouse.Inventory
}

func (w countingWarehouse) Inventory() warehouse.Inventory { return w.inv }

func (countingWarehouse) LoadStates(context.Context) ([]pipeline.StreamState, error) {
	return []pipeline.StreamState{{SurveyID: 2, Stream: "completed"}, {SurveyID: 1, Stream: "completed"}, {SurveyID: 1, Stream: "partial"}}, nil
}

func (countingWarehouse) LoadSurveys(context.Context) ([]pipeline.SurveyInfo, error) {
	return []pipeline.SurveyInfo{{SurveyID: 1, Name: "Spokojenost"}, {SurveyID: 3, Name: "not synced"}}, nil
}

type mapInventory map[int64]map[survey.GUID]string

func (m mapInventory) CurrentResponses(_ context.Context, id int64) (map[survey.GUID]string, error) {
	return m[id], nil
}

func (m mapInventory) HasResponse(_ context.Context, id int64, r survey.GUID) (bool, error) {
	_, ok := m[id][r]
	return ok, nil
}

func TestCurrentCounts(t *testing.T) {
	inv := mapInventory{
		1: {"a": survey.StatusCompleted, "b": survey.StatusCompleted, "c": survey.StatusPartial},
		2: {"d": survey.StatusDisqualified},
	}
	wh := countingWarehouse{inv: inv}
	counts, total, err := CurrentCounts(context.Background(), wh, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []parquet.SurveyCount{
		{SurveyID: 1, Name: "Spokojenost", ByStatus: map[string]int{survey.StatusCompleted: 2, survey.StatusPartial: 1}, Current: 3},
		{SurveyID: 2, ByStatus: map[string]int{survey.StatusDisqualified: 1}, Current: 1},
	}
	if total != 4 || !reflect.DeepEqual(counts, want) {
		t.Fatalf("counts %+v, total %d; want %+v, 4", counts, total, want)
	}
	counts, total, err = CurrentCounts(context.Background(), wh, 2)
	if err != nil || total != 1 || len(counts) != 1 || counts[0].SurveyID != 2 {
		t.Fatalf("survey 2 only: %+v %d %v", counts, total, err)
	}
	if _, _, err := CurrentCounts(context.Background(), countingWarehouse{}, 0); err == nil {
		t.Fatal("no error without an inventory")
	}
}
