package daemon

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/surveysync/surveysync/config"
	"github.com/surveysync/surveysync/erase"
	"github.com/surveysync/surveysync/record"
	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/survey"
)

// NewEraser is the erasure service of a warehouse (sync.erase_deleted,
// surveysync erase): rows through the warehouse's Eraser, objects in
// files.url when files are copied, contact ids hashed as privacy: says. It
// has read the tombstones. The returned func closes the files store. A
// warehouse that cannot erase gives a nil Service.
func NewEraser(ctx context.Context, cfg *config.Config, wh warehouse.Warehouse, log *slog.Logger) (*erase.Service, func() error, error) {
	noop := func() error { return nil }
	if wh.Eraser() == nil {
		return nil, noop, nil
	}
	policy, err := newPolicy(cfg)
	if err != nil {
		return nil, noop, err
	}
	o := erase.Options{Warehouse: wh.Eraser(), Logger: log.With("component", "erase")}
	if policy.HashesContactID() {
		o.HashContact = policy.HashInt
	}
	closeStore := noop
	if cfg.Files.Enabled {
		bs, err := openBlobStore(ctx, cfg)
		if err != nil {
			return nil, noop, fmt.Errorf("files.url: %w", err)
		}
		o.Objects, closeStore = bs, bs.Close
	}
	s, err := erase.New(o)
	if err != nil {
		_ = closeStore()
		return nil, noop, err
	}
	if err := s.Load(ctx); err != nil {
		_ = closeStore()
		return nil, noop, err
	}
	return s, closeStore, nil
}

// withTombstones keeps webhook events of erased responses out of the
// warehouse's webhook log: a webhook about a response erased long ago
// would otherwise name it again.
func withTombstones(wh warehouse.Warehouse, s *erase.Service) warehouse.Warehouse {
	if s == nil {
		return wh
	}
	return tombstonedWarehouse{wh, s}
}

type tombstonedWarehouse struct {
	warehouse.Warehouse
	s *erase.Service
}

func (w tombstonedWarehouse) WebhookLog() record.WebhookLog {
	l := w.Warehouse.WebhookLog()
	if l == nil {
		return nil
	}
	return tombstonedLog{l, w.s}
}

type tombstonedLog struct {
	record.WebhookLog
	s *erase.Service
}

func (l tombstonedLog) LogEvents(ctx context.Context, events []record.WebhookEvent) error {
	kept := events[:0:0]
	for _, e := range events {
		if e.ResponseID != "" && l.s.Erased(e.SurveyID, survey.GUID(e.ResponseID)) {
			continue
		}
		kept = append(kept, e)
	}
	if len(kept) == 0 {
		return nil
	}
	return l.WebhookLog.LogEvents(ctx, kept)
}
