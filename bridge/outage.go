package bridge

import (
	"errors"
	"net/http"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/consul/api"
)

// outages follows, per datacenter ("" is the local one), whether Consul
// answers, and the hold window that follows a real outage (see docs/operations/failure-behaviour.md,
// "When Consul restarts"). A single failed request is not an outage: the
// hold arms only when a datacenter gave no answer for at least `after`, or
// refused connections (its agent was down: a restart, however quick, is
// what the hold is for), and then holds back health downgrades and removals of that
// datacenter's instances only, so an unreachable failover datacenter never
// delays what the local one reports. An HTTP answer that is an error
// (403, 404, 429) is an answer: Consul is reachable. It reads no clock:
// every call is told the time.
type outages struct {
	after, hold time.Duration

	mu  sync.Mutex
	dcs map[string]*dcState
}

type dcState struct {
	unansweredSince time.Time // first unanswered request since the last answer
	refused         bool      // a connection was refused since the last answer
	failingSince    time.Time // first failed request (answered or not) since the last success
	lastSuccess     time.Time
	holdUntil       time.Time
	lastErr         error // the last failed request's error, nil after a success
	// refusedData is the last data query's error while Consul answered
	// it with one (a revoked token's 403), nil after a data query
	// succeeds. The probe asks a path that needs no token, so its
	// success must not clear that failure.
	refusedData error
}

func newOutages(after, hold time.Duration) *outages {
	return &outages{after: after, hold: hold, dcs: map[string]*dcState{}}
}

// answered reports whether err still means Consul answered.
func answered(err error) bool {
	if err == nil {
		return true
	}
	var se api.StatusError
	return errors.As(err, &se) && se.Code >= 400 && se.Code < 500 && se.Code != http.StatusRequestTimeout
}

// record notes one request's outcome at now. It reports the outage that
// just ended (how long dc gave no answer, at least 1ns) when it arms a
// hold, else 0.
// holdArms says whether a hold may arm at all (the daemon arms none
// before it first served).
func (o *outages) record(dc string, err error, now time.Time, holdArms bool) time.Duration {
	return o.recordAs(dc, err, now, holdArms, false)
}

// probed notes the outcome of the reachability probe (GET
// /v1/status/leader, which needs no ACL token): like record, except that
// a success only says Consul answers. While data queries keep failing
// with answers (403 for a revoked or expired token), they still fail: the
// probe used to clear that, so /readyz and the stale check stayed green
// while nothing new was served.
func (o *outages) probed(dc string, err error, now time.Time, holdArms bool) time.Duration {
	return o.recordAs(dc, err, now, holdArms, true)
}

func (o *outages) recordAs(dc string, err error, now time.Time, holdArms, probe bool) time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	st := o.dcs[dc]
	if st == nil {
		st = &dcState{}
		o.dcs[dc] = st
	}
	switch {
	case !probe && err == nil:
		st.refusedData = nil
	case !probe && answered(err):
		st.refusedData = err
	}
	switch {
	case err == nil && probe && st.refusedData != nil:
		st.lastErr = st.refusedData // still failing, for what needs the token
	case err == nil:
		st.lastErr = nil
		st.failingSince, st.lastSuccess = time.Time{}, now
	default:
		st.lastErr = err
		if st.failingSince.IsZero() {
			st.failingSince = now
		}
	}
	if !answered(err) {
		if st.unansweredSince.IsZero() {
			st.unansweredSince = now
		}
		st.refused = st.refused || errors.Is(err, syscall.ECONNREFUSED)
		return 0
	}
	if st.unansweredSince.IsZero() {
		return 0
	}
	down, refused := now.Sub(st.unansweredSince), st.refused
	st.unansweredSince, st.refused = time.Time{}, false
	if down < o.after && !refused || o.hold <= 0 || !holdArms {
		return 0
	}
	st.holdUntil = now.Add(o.hold)
	return max(down, 1)
}

// up reports whether dc's Consul is reachable at now: it answered its
// last request, or has been silent for less than `after` (one failed
// request retried at once does not make consul_up flap).
func (o *outages) up(dc string, now time.Time) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	st := o.dcs[dc]
	return st == nil || st.unansweredSince.IsZero() || now.Sub(st.unansweredSince) < o.after
}

// failing returns since when dc's requests have failed (zero while the
// last one succeeded) and when one last succeeded (zero if never).
func (o *outages) failing(dc string) (since, lastSuccess time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if st := o.dcs[dc]; st != nil {
		return st.failingSince, st.lastSuccess
	}
	return time.Time{}, time.Time{}
}

// lastError is the error of dc's last request while it fails, else nil.
func (o *outages) lastError(dc string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if st := o.dcs[dc]; st != nil {
		return st.lastErr
	}
	return nil
}

// holding returns the datacenters whose health downgrades are held at now
// (nil if none) and when the earliest of those holds ends.
func (o *outages) holding(now time.Time) (map[string]bool, time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var held map[string]bool
	var next time.Time
	for dc, st := range o.dcs {
		if !now.Before(st.holdUntil) {
			continue
		}
		if held == nil {
			held = map[string]bool{}
		}
		held[dc] = true
		if next.IsZero() || st.holdUntil.Before(next) {
			next = st.holdUntil
		}
	}
	return held, next
}

// unanswered returns since when dc has given no answer (zero while it
// answers).
func (o *outages) unanswered(dc string) time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	if st := o.dcs[dc]; st != nil {
		return st.unansweredSince
	}
	return time.Time{}
}
