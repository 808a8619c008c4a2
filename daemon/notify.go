package daemon

import (
	"context"
	"log/slog"

	sddaemon "github.com/coreos/go-systemd/v22/daemon"
)

// notifyReady tells systemd (a Type=notify unit, deploy/systemd) that the
// daemon has started: the sink is open, the metrics listener is bound and,
// with webhooks on, the spool is open and the webhook listener bound. It
// does not wait for /readyz: a ClickHouse outage must not fail the start
// of a daemon that correctly waits for it. Without NOTIFY_SOCKET (not
// under systemd) it does nothing.
func notifyReady(ctx context.Context, d *parts, log *slog.Logger) {
	if d.rx != nil {
		select {
		case <-d.rx.Started():
		case <-ctx.Done():
			return
		}
	}
	sdNotify(log, sddaemon.SdNotifyReady)
}

// notifyStopping tells systemd the daemon is draining after SIGTERM.
func notifyStopping(log *slog.Logger) { sdNotify(log, sddaemon.SdNotifyStopping) }

func sdNotify(log *slog.Logger, state string) {
	if sent, err := sddaemon.SdNotify(false, state); err != nil {
		log.Warn("systemd notification failed", "state", state, "err", err)
	} else if sent {
		log.Debug("systemd notified", "state", state)
	}
}
