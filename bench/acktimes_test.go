package bench

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve"
)

// TestLastPushACKs: only streams sent the newest sent_at's version that
// ACKed it count; a stream still on an older version, one that has not
// ACKed, and one of another type are left out.
func TestLastPushACKs(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	eds := func(sent string, sentAt int, acked string, ackedAt int) serve.ProxyStatus {
		return serve.ProxyStatus{Types: map[string]*serve.TypeStatus{
			"EDS": {VersionSent: sent, SentAt: at(sentAt), VersionAcked: acked, AckedAt: at(ackedAt)},
		}}
	}
	ps := []serve.ProxyStatus{
		eds("v2", 0, "v2", 5),
		eds("v2", 10, "v2", 40),
		eds("v2", 20, "v2", 120),
		eds("v2", 30, "v1", -500),   // not ACKed yet
		eds("v2", 30, "v1", 35),     // v1's ACK came after v2 was sent
		eds("v1", -900, "v1", -800), // an older push
		{Types: map[string]*serve.TypeStatus{"CDS": {VersionSent: "c", SentAt: at(50), VersionAcked: "c", AckedAt: at(900)}}},
	}
	got := lastPushACKs(ps, "EDS")
	if got.Streams != 3 {
		t.Fatalf("%d streams counted, want 3 (%v)", got.Streams, got.After)
	}
	if want := []time.Duration{5 * time.Millisecond, 30 * time.Millisecond, 100 * time.Millisecond}; !slices.Equal(got.After, want) {
		t.Errorf("ACK after send %v, want %v", got.After, want)
	}
	if got.Sends != 20*time.Millisecond || got.ACKs != 120*time.Millisecond {
		t.Errorf("sent over %s, ACKed by %s; want 20ms and 120ms", got.Sends, got.ACKs)
	}
	if s := lastPushACKs(nil, "EDS").String(); s != "no stream ACKed the last push" {
		t.Errorf("empty: %q", s)
	}
}

// TestAdminGet: the bearer token is sent when there is one, and an answer
// other than 200 is an error naming the URL and status.
func TestAdminGet(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer sesame" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		_, _ = w.Write([]byte("[]"))
	}))
	defer srv.Close()
	ctx := context.Background()
	if ps, err := proxies(ctx, srv.URL+"/v1/proxies", "sesame"); err != nil || len(ps) != 0 {
		t.Errorf("with the token: %v %v", ps, err)
	}
	if _, err := proxies(ctx, srv.URL+"/v1/proxies", ""); err == nil || !strings.Contains(err.Error(), "401") || !strings.Contains(err.Error(), "/v1/proxies") {
		t.Errorf("without the token: %v, want a 401 naming the URL", err)
	}
}
