package bench

import (
	"context"
	"fmt"
	"os"
	"testing"
)

// TestMain lets the test binary stand in for `xds-load agents-server`,
// which startAgentsProcess starts as Options.Self.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "agents-server" {
		if err := AgentsServer(context.Background(), os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "agents-server:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}
