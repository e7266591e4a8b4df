package main

import (
	"context"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/rs/zerolog"
)

// notifyPoll is how often readiness is looked at for systemd.
const notifyPoll = 250 * time.Millisecond

// notifySystemd speaks systemd's notify protocol (Type=notify units) for
// a daemon: STATUS= with why it is not ready yet, READY=1 once
// notReady() is "" (what /readyz answers 200 to), the watchdog's
// WATCHDOG=1 at half its interval while the daemon still answers, and
// STOPPING=1 when ctx ends. It returns when ctx ends, at once when the
// process is not run by systemd ($NOTIFY_SOCKET unset).
//
// started is closed once the daemon's listeners are open; notReady is
// only asked after that. The watchdog is fed from the same loop that
// asks notReady, so a daemon whose readiness check hangs (its state
// locked up) stops feeding it and systemd restarts it.
func notifySystemd(ctx context.Context, log zerolog.Logger, started <-chan struct{}, notReady func() string) {
	send := func(state string) {
		if _, err := daemon.SdNotify(false, state); err != nil {
			log.Warn().Err(err).Str("state", state).Msg("systemd notify failed")
		}
	}
	switch ok, err := daemon.SdNotify(false, "STATUS=starting"); {
	case err != nil:
		log.Warn().Err(err).Msg("cannot notify systemd ($NOTIFY_SOCKET); a Type=notify unit will time out starting")
		return
	case !ok:
		return // not run by systemd
	}
	watchdog, err := daemon.SdWatchdogEnabled(false)
	if err != nil {
		log.Warn().Err(err).Msg("systemd watchdog settings are invalid; not feeding it")
	}
	poll := notifyPoll
	if watchdog > 0 && watchdog/2 < poll {
		poll = watchdog / 2
	}
	tick := time.NewTicker(poll)
	defer tick.Stop()
	var lastFed time.Time
	ready, status := false, "starting"
	select {
	case <-ctx.Done():
		send("STOPPING=1\nSTATUS=stopping")
		return
	case <-started:
	}
	for {
		reason := notReady()
		switch {
		case reason == "" && !ready:
			ready, status = true, "ready"
			send("READY=1\nSTATUS=ready")
			log.Debug().Msg("told systemd: ready")
		case reason != "" && reason != status:
			// After READY=1 systemd keeps the unit active; STATUS= still
			// tells `systemctl status` what /readyz says.
			status = reason
			send("STATUS=" + reason)
		case reason == "" && status != "ready":
			status = "ready"
			send("STATUS=ready")
		}
		if now := time.Now(); watchdog > 0 && now.Sub(lastFed) >= watchdog/2 {
			send("WATCHDOG=1")
			lastFed = now
		}
		select {
		case <-ctx.Done():
			send("STOPPING=1\nSTATUS=stopping")
			return
		case <-tick.C:
		}
	}
}
