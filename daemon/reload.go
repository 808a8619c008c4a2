package daemon

import (
	"context"
	"os"
	"os/signal"
	"reflect"
	"slices"
	"syscall"

	"github.com/surveysync/surveysync/config"
)

// Configuration reload: on SIGHUP the daemon reads its configuration again
// (the same file, environment and flags, through Options.Reload) and
// applies what can change while it runs: surveys, surveys_exclude and
// feeds (the feed runner is replaced, feedslot.go). A
// configuration that does not load or validate is refused with one log
// line and the running one is kept; changes of other keys are named in the
// log and wait for a restart. SIGHUP rather than a file watch: the operator
// says when an edit is complete (an editor's half-written file, or a
// Kubernetes ConfigMap's symlink swap, is never read midway), it needs no
// dependency, and systemd's ExecReload=kill -HUP $MAINPID is the
// convention (docs/operations.md, "Reloading the configuration").

// watchReload reloads the configuration at every SIGHUP until ctx ends.
func (d *parts) watchReload(ctx context.Context, reload func() (*config.Config, error)) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-hup:
			d.reload(reload)
		case <-ctx.Done():
			return
		}
	}
}

// reload reads the configuration and applies it, or refuses it.
func (d *parts) reload(read func() (*config.Config, error)) {
	next, err := read()
	if err != nil {
		d.log.Error("configuration reload refused; the running configuration is kept", "err", err)
		return
	}
	cur := d.cfg
	applied := withReloadable(cur, next)
	feedsChanged := !reflect.DeepEqual(cur.Feeds, next.Feeds)
	if feedsChanged {
		if err := d.feeds.check(applied); err != nil {
			d.log.Error("configuration reload refused; the running configuration is kept", "err", err)
			return
		}
	}
	added := d.applySurveys(cur, next)
	if feedsChanged {
		if err := d.feeds.set(applied); err != nil {
			d.log.Error("feeds: the reloaded feeds cannot be built; no feed runs until the next reload or restart", "err", err)
		}
	}
	later := restartKeys(cur, next)
	d.cfg = applied
	attrs := []any{"surveys", next.Surveys, "surveys_exclude", next.SurveysExclude, "added", added, "feeds", feedNames(next)}
	if len(later) > 0 {
		attrs = append(attrs, "not_applied_until_restart", later)
	}
	d.log.Info("configuration reloaded", attrs...)
}

func feedNames(cfg *config.Config) []string {
	out := make([]string, len(cfg.Feeds))
	for i, f := range cfg.Feeds {
		out[i] = f.Name
	}
	return out
}

// applySurveys excludes and adds surveys as next says, and returns the
// surveys added to polling.
func (d *parts) applySurveys(cur, next *config.Config) []int64 {
	d.exclude.set(next.SurveysExclude)
	if d.hooks != nil {
		d.hooks.setConfigured(next.Surveys)
	}
	for _, id := range next.SurveysExclude {
		d.poller.RemoveSurvey(id)
	}
	var added []int64
	for _, id := range pollingSet(next, d.book) {
		if !slices.Contains(cur.Surveys, id) || slices.Contains(cur.SurveysExclude, id) {
			d.poller.AddSurvey(id)
			added = append(added, id)
		}
	}
	return added
}

// restartKeys names the top-level keys whose change a reload does not
// apply.
func restartKeys(cur, next *config.Config) []string {
	var out []string
	a, b := reflect.ValueOf(cur).Elem(), reflect.ValueOf(next).Elem()
	for i := range a.NumField() {
		key := a.Type().Field(i).Tag.Get("koanf")
		if key == "surveys" || key == "surveys_exclude" || key == "feeds" { // applied
			continue
		}
		if key == "api" && cur.Demo.Emulator.Enabled {
			continue // the emulator points the api section at itself
		}
		if !reflect.DeepEqual(a.Field(i).Interface(), b.Field(i).Interface()) {
			out = append(out, key)
		}
	}
	return out
}

// withReloadable is cur with next's reloadable keys: what runs now.
func withReloadable(cur, next *config.Config) *config.Config {
	c := *cur
	c.Surveys = slices.Clone(next.Surveys)
	c.SurveysExclude = slices.Clone(next.SurveysExclude)
	c.Feeds = slices.Clone(next.Feeds)
	return &c
}
