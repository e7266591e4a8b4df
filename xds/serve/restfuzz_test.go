package serve

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/rs/zerolog"
)

// restFuzzServer is one Server with a small translation, shared by every
// input of a fuzzing run.
var restFuzzServer = sync.OnceValues(func() (*Server, error) {
	s := NewServer(ServerConfig{Logger: zerolog.Nop(), ShutdownGrace: time.Second})
	_, err := s.Update(context.Background(), testOutput(nilTB{}, []string{"api", "web"}, 8080), resolveEdge)
	return s, err
})

// FuzzRESTRequest: a REST-JSON poll of any body, anyone's to send on the
// xDS port, is answered with one of the documented statuses, never a
// panic, and leaves nothing behind (TestRESTPollsLeaveNothing).
func FuzzRESTRequest(f *testing.F) {
	for _, body := range []string{
		`{"node":{"id":"x","cluster":"edge"}}`,
		`{"node":{"id":"x","cluster":"edge"},"resource_names":["api","nope"],"version_info":"1"}`,
		`{"node":{"id":"x","cluster":"c","user_agent_name":"envoy","user_agent_build_version":{"version":{"major_number":1,"minor_number":10}}}}`,
		`{"node":{"id":"x","cluster":"sidecar:vm/x"}}`,
		`{}`, `not json`, `{"node":{"metadata":{"consul_node":"vm"}}}`,
	} {
		f.Add([]byte(body), byte(0))
	}
	types := []string{resourcev3.ClusterType, resourcev3.EndpointType, resourcev3.ListenerType, resourcev3.RouteType, resourcev3.SecretType}
	f.Fuzz(func(t *testing.T, body []byte, typ byte) {
		s, err := restFuzzServer()
		if err != nil {
			t.Fatal(err)
		}
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "/v3/discovery:x", bytes.NewReader(body))
		s.serveFetch(w, r, types[int(typ)%len(types)])
		switch w.Code {
		case http.StatusOK, http.StatusNotModified, http.StatusBadRequest, http.StatusForbidden, http.StatusNotFound,
			http.StatusRequestEntityTooLarge, http.StatusServiceUnavailable, http.StatusInternalServerError:
		default:
			t.Fatalf("status %d for %q", w.Code, body)
		}
		s.mu.Lock()
		kept := len(s.downgraded)
		s.mu.Unlock()
		if kept != 0 {
			t.Fatalf("a poll left %d downgrade notes behind", kept)
		}
	})
}
