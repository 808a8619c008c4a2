package daemon

import (
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/surveysync/surveysync/config"
	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/source/feed"
)

// feedOptions maps the configuration's feeds onto source/feed's options.
func feedOptions(cfg *config.Config, conn feed.QueryConn) ([]feed.Options, error) {
	out := make([]feed.Options, 0, len(cfg.Feeds))
	for i, f := range cfg.Feeds {
		o := feed.Options{
			Name:           f.Name,
			Type:           f.Type,
			DistributionID: f.DistributionID,
			Channel:        f.Channel,
			Mapping:        f.Mapping,
			Salutation: feed.Salutation{
				Generate:         f.Salutation.Generate,
				PrefixMale:       f.Salutation.PrefixMale,
				PrefixFemale:     f.Salutation.PrefixFemale,
				IncludeFirstName: f.Salutation.IncludeFirstName,
				IncludeLastName:  f.Salutation.IncludeLastName,
			},
			DedupeKey:   f.DedupeKey,
			Interval:    f.Interval,
			Concurrency: f.Concurrency,
			CSVDir:      feed.CSVDirOptions{Dir: f.CSVDir.Dir, Delimiter: f.CSVDir.Delimiter, MaxRecordBytes: int64(f.CSVDir.MaxRecordBytes)},
			HTTP:        feed.HTTPOptions{Path: f.HTTP.Path, Token: f.HTTP.Token.Value(), Listen: f.HTTP.Listen, MaxBodyBytes: int64(f.HTTP.MaxBodyBytes)},
			Send: feed.SendOptions{
				MessageID: f.Send.MessageID,
				Schedule: feed.Schedule{
					Policy: f.Send.Schedule.Policy,
					Delay:  f.Send.Schedule.Delay,
					Window: feed.Window{From: f.Send.Schedule.Window.From, To: f.Send.Schedule.Window.To, TimeZone: f.Send.Schedule.Window.TimeZone},
				},
			},
		}
		for _, d := range f.Send.Schedule.Window.Days {
			wd, err := config.ParseWeekday(d)
			if err != nil {
				return nil, fmt.Errorf("feeds[%d].send.schedule.window.days: %w", i, err)
			}
			o.Send.Schedule.Window.Days = append(o.Send.Schedule.Window.Days, wd)
		}
		if f.Type == config.FeedClickHouseQuery {
			if conn == nil {
				return nil, fmt.Errorf("feeds[%d] (%s) is a clickhouse_query feed but clickhouse.addr is not set", i, f.Name)
			}
			o.ClickHouseQuery = feed.QueryOptions{Query: f.ClickHouseQuery.Query, Conn: conn}
		}
		out = append(out, o)
	}
	return out, nil
}

// NewFeedRunner builds the feed runner with the warehouse's ledger.
func NewFeedRunner(cfg *config.Config, api feed.API, wh warehouse.Warehouse, leading func() bool, log *slog.Logger, reg prometheus.Registerer) (*feed.Runner, error) {
	ledger, err := wh.FeedLedger()
	if err != nil {
		return nil, fmt.Errorf("feed ledger: %w", err)
	}
	opts, err := feedOptions(cfg, wh.QueryConn())
	if err != nil {
		return nil, err
	}
	grace := cfg.Shutdown.DrainTimeout
	if cfg.HA.Enabled() {
		// A daemon that loses the lead lets its chunks in flight finish for
		// at most this long: before another daemon can lead (fencing,
		// docs/operations.md "High availability").
		grace = min(grace, cfg.HA.SessionTimeout/4)
	}
	return feed.NewRunner(feed.RunnerOptions{
		Feeds: opts, API: api, Ledger: ledger, Registerer: reg,
		Logger: log.With("component", "feed"), ShutdownGrace: grace, Leading: leading,
	})
}
