package bridge

// NotReadyReason says why the daemon is not ready, as /readyz does, or ""
// when /readyz answers 200. The CLI reports it to systemd (STATUS=) and
// sends READY=1 when it turns "".
func (d *Daemon) NotReadyReason() string { return d.notReadyReason() }
