package consul

import (
	"context"
	"time"

	"github.com/hashicorp/consul/api"
)

// Probe asks the agent a question that never blocks (the raft leader)
// every interval, each request bounded by timeout, and reports each
// outcome with the time the request started. Blocking queries cannot tell
// a frozen agent (SIGSTOP, a wedged process, a black-holed network) from a
// quiet catalog until their wait runs out, minutes later; this does within
// interval + timeout. It runs until ctx ends.
func Probe(ctx context.Context, client *api.Client, interval, timeout time.Duration, report func(started time.Time, err error)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		started := time.Now()
		rctx, cancel := context.WithTimeout(ctx, timeout)
		_, err := client.Status().LeaderWithQueryOptions((&api.QueryOptions{}).WithContext(rctx))
		cancel()
		if ctx.Err() != nil {
			return
		}
		report(started, err)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
