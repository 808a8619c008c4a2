package daemon

import (
	"context"
	"testing"

	"github.com/surveysync/surveysync/erase"
	"github.com/surveysync/surveysync/record"
	"github.com/surveysync/surveysync/sink/warehouse"
)

type fakeLog struct{ got []record.WebhookEvent }

func (l *fakeLog) LogEvents(_ context.Context, es []record.WebhookEvent) error {
	l.got = append(l.got, es...)
	return nil
}

type auditOnly struct {
	warehouse.Eraser
	es []warehouse.Erasure
}

func (a auditOnly) Erasures(context.Context) ([]warehouse.Erasure, error) { return a.es, nil }

// Webhook events of erased responses are not logged.
func TestTombstonedWebhookLog(t *testing.T) {
	const erased = "da453b67-791e-4d4d-9009-75b1ed8a33c1"
	s, err := erase.New(erase.Options{Warehouse: auditOnly{es: []warehouse.Erasure{{ResponseKey: warehouse.ResponseKey{SurveyID: 1, ResponseID: erased}, State: warehouse.ErasureDone}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	l := &fakeLog{}
	log := tombstonedLog{l, s}
	if err := log.LogEvents(context.Background(), []record.WebhookEvent{
		{EventID: "a", SurveyID: 1, ResponseID: erased},
		{EventID: "b", SurveyID: 1, ResponseID: "da453b67-791e-4d4d-9009-75b1ed8a33c2"},
		{EventID: "c", SurveyID: 2, ResponseID: erased},
		{EventID: "d", SurveyID: 1},
	}); err != nil {
		t.Fatal(err)
	}
	if len(l.got) != 3 || l.got[0].EventID != "b" || l.got[1].EventID != "c" || l.got[2].EventID != "d" {
		t.Errorf("logged %+v, want b, c and d", l.got)
	}
}
