package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve"
)

// ackTiming is when a server's streams answered its last push of one type,
// read from the server's own /v1/proxies (sent_at, acked_at): what a
// server's CPU per change depends on besides its own code. A gRPC server
// woken for each lone ACK spends 4–5× what it spends on ACKs that arrive
// together (floor-acks), so a tier whose ACKs trickle in costs the
// central more per stream than one whose ACKs come during the fan-out.
type ackTiming struct {
	Streams int             // streams sent the last version that ACKed it
	After   []time.Duration // per stream: its ACK after its send
	// Sends is first to last send of that version (the fan-out); ACKs,
	// first send to last ACK.
	Sends, ACKs time.Duration
}

// lastPushACKs reads typ ("EDS") of every stream: the version last sent
// (the newest sent_at's), and of the streams sent it, those that ACKed
// it. Streams of other node.clusters, sent other versions, are left out.
func lastPushACKs(ps []serve.ProxyStatus, typ string) ackTiming {
	var newest *serve.TypeStatus
	for _, p := range ps {
		if ts := p.Types[typ]; ts != nil && !ts.SentAt.IsZero() && (newest == nil || ts.SentAt.After(newest.SentAt)) {
			newest = ts
		}
	}
	var out ackTiming
	if newest == nil {
		return out
	}
	var first, lastSend, lastACK time.Time
	for _, p := range ps {
		ts := p.Types[typ]
		if ts == nil || ts.VersionSent != newest.VersionSent || ts.VersionAcked != ts.VersionSent || ts.AckedAt.Before(ts.SentAt) {
			continue
		}
		if first.IsZero() || ts.SentAt.Before(first) {
			first = ts.SentAt
		}
		if ts.SentAt.After(lastSend) {
			lastSend = ts.SentAt
		}
		if ts.AckedAt.After(lastACK) {
			lastACK = ts.AckedAt
		}
		out.After = append(out.After, ts.AckedAt.Sub(ts.SentAt))
	}
	out.Streams = len(out.After)
	if out.Streams > 0 {
		out.Sends, out.ACKs = lastSend.Sub(first), lastACK.Sub(first)
	}
	return out
}

func (a ackTiming) String() string {
	if a.Streams == 0 {
		return "no stream ACKed the last push"
	}
	return fmt.Sprintf("last push's ACKs (server's /v1/proxies, %d streams): %s p10, %s p50, %s p99 after their send; sent over %s, all ACKed %s after the first send",
		a.Streams, ms(percentile(a.After, 10)), ms(percentile(a.After, 50)), ms(percentile(a.After, 99)), ms(a.Sends), ms(a.ACKs))
}

// ackNote is lastPushACKs of the EDS of every bridge target of the run,
// "" when none serves /v1/proxies (the baseline, the peer).
func (r *run) ackNote(ctx context.Context) string {
	var all []serve.ProxyStatus
	for _, t := range r.targets() {
		if t.Name == "peer" || t.Name == "baseline" || t.MetricsURL == "" {
			return ""
		}
		ps, err := proxies(ctx, strings.TrimSuffix(t.MetricsURL, "/metrics")+"/v1/proxies", t.AdminToken)
		if err != nil {
			return "last push's ACKs: " + err.Error()
		}
		all = append(all, ps...)
	}
	return lastPushACKs(all, "EDS").String()
}

func proxies(ctx context.Context, url, token string) ([]serve.ProxyStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := adminGet(ctx, url, token)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var ps []serve.ProxyStatus
	if err := json.NewDecoder(resp.Body).Decode(&ps); err != nil {
		return nil, fmt.Errorf("%s: %w", url, err)
	}
	return slices.Clip(ps), nil
}
