package bench

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestRatiosPairAdjacentRuns: with servers repeated in -compare (base,
// bridge, base, bridge), each base row is compared with the bridge row
// of the same pass, not always with the last bridge row.
func TestRatiosPairAdjacentRuns(t *testing.T) {
	row := func(server string, p99 time.Duration) Row {
		return Row{Scenario: "S9", Server: server, Mode: "delta", N: 100, P99: p99, CPU: 1}
	}
	var out bytes.Buffer
	writeRatios(&out, []Row{
		row("base", 100*time.Millisecond), row("bridge", 10*time.Millisecond),
		row("base", 300*time.Millisecond), row("bridge", 100*time.Millisecond),
	})
	var p99s []string
	for _, l := range strings.Split(out.String(), "\n") {
		if i := strings.Index(l, "p99 ×"); i >= 0 {
			p99s = append(p99s, strings.Fields(l[i:])[1])
		}
	}
	if strings.Join(p99s, " ") != "×10.00, ×3.00," {
		t.Errorf("p99 ratios %q, want ×10.00 (first pass) then ×3.00 (second pass):\n%s", p99s, out.String())
	}
}
