package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"testing"
	"time"
)

// The floor server holds each connection's stream at rest (its handler in
// Recv after one response) and reports its memory on request: the four
// goroutines a grpc-go connection with one stream holds are there.
func TestFloorServerHoldsStreamsAtRest(t *testing.T) {
	for _, server := range []string{"bridge-options", "grpc-defaults"} {
		t.Run(server, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			inR, inW := io.Pipe()
			outR, outW := io.Pipe()
			done := make(chan error, 1)
			go func() { done <- ServeFloor(ctx, server, inR, outW) }()
			out := bufio.NewScanner(outR)
			if !out.Scan() {
				t.Fatal("no address")
			}
			addr := out.Text()
			report := func() FloorStats {
				t.Helper()
				go func() { _, _ = io.WriteString(inW, "report\n") }()
				if !out.Scan() {
					t.Fatal("no report")
				}
				var st FloorStats
				if err := json.Unmarshal(out.Bytes(), &st); err != nil {
					t.Fatal(err)
				}
				return st
			}
			before := report()
			const n = 20
			for _, mode := range []Mode{Delta, SotW} {
				streams, err := floorConnect(ctx, addr, FloorConfig{N: n, Parallel: 4, Mode: mode})
				if err != nil {
					t.Fatal(err)
				}
				time.Sleep(200 * time.Millisecond)
				after := report()
				// The load generator's side runs in this process too: one
				// reader goroutine per stream. gRPC's side: reader, writer,
				// keepalive and the handler per connection.
				if got := after.Goroutines - before.Goroutines; got < 5*n {
					t.Errorf("%v: %d more goroutines with %d streams open, want ≥ %d (each stream at rest on the server)", mode, got, n, 5*n)
				}
				if after.StackInuse <= before.StackInuse {
					t.Errorf("%v: stacks did not grow with %d connections: %d → %d", mode, n, before.StackInuse, after.StackInuse)
				}
				for _, s := range streams {
					s.Close()
				}
			}
			inW.Close()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	}
	if err := ServeFloor(context.Background(), "no-such", nil, io.Discard); err == nil {
		t.Error("an unknown floor server was accepted")
	}
}
