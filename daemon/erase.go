package daemon

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/surveysync/surveysync/config"
	"github.com/surveysync/surveysync/erase"
	"github.com/surveysync/surveysync/sink/warehouse"
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
