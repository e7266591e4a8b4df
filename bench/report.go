package bench

import (
	"fmt"
	"io"
	"strings"
)

// WriteTable prints the rows as a Markdown table, then the comparison
// ratios (other server ÷ bridge, same protocol mode and N).
func WriteTable(w io.Writer, rows []Row) {
	fmt.Fprintln(w, "| scenario | server | mode | N | p50 | p99 | max | server CPU s | server peak RSS | bytes sent | Consul reqs | notes |")
	fmt.Fprintln(w, "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %s | %s | %d | %s | %s | %s | %.2f | %s | %s | %s | %s |\n",
			r.Scenario, r.Server, r.Mode, r.N, ms(r.P50), ms(r.P99), ms(r.Max), r.CPU,
			bytesStr(float64(r.PeakRSS)), bytesStr(float64(r.Bytes)), reqs(r.ConsulReqs), strings.ReplaceAll(r.Notes, "|", "/"))
	}
	writeRatios(w, rows)
}

type ratioKey struct {
	scenario, mode string
	n              int
}

// writeRatios pairs each other server's row with a bridge row of the
// same scenario, mode and N: with -compare repeating servers (A, B, A,
// B), the k-th row of a server with the k-th bridge row, so each ratio
// compares adjacent runs (the last bridge row when there are fewer).
func writeRatios(w io.Writer, rows []Row) {
	bridge := map[ratioKey][]Row{}
	for _, r := range rows {
		if r.Server == "bridge" && r.Mode != "mixed" && !r.Failed {
			k := ratioKey{r.Scenario, r.Mode, r.N}
			bridge[k] = append(bridge[k], r)
		}
	}
	type seenKey struct {
		server string
		ratioKey
	}
	seen := map[seenKey]int{}
	var lines []string
	for _, r := range rows {
		if r.Server == "bridge" || r.Mode == "mixed" {
			continue
		}
		k := ratioKey{r.Scenario, r.Mode, r.N}
		i := seen[seenKey{r.Server, k}]
		seen[seenKey{r.Server, k}] = i + 1
		bs := bridge[k]
		if r.Failed || len(bs) == 0 {
			continue
		}
		b := bs[min(i, len(bs)-1)]
		var parts []string
		add := func(name string, other, base float64) {
			if base > 0 && other >= 0 {
				parts = append(parts, fmt.Sprintf("%s ×%.2f", name, other/base))
			}
		}
		add("p99", float64(r.P99), float64(b.P99))
		add("max", float64(r.Max), float64(b.Max))
		switch {
		case r.CPUPerChange > 0:
			add("CPU/change", r.CPUPerChange, b.CPUPerChange)
		default:
			add("CPU", r.CPU, b.CPU)
		}
		if r.RSSPerProxy != 0 {
			add("RSS/proxy", r.RSSPerProxy, b.RSSPerProxy)
		}
		add("bytes", float64(r.Bytes), float64(b.Bytes))
		if len(parts) > 0 {
			lines = append(lines, fmt.Sprintf("| %s | %s ÷ bridge | %s | %d | %s |", r.Scenario, r.Server, r.Mode, r.N, strings.Join(parts, ", ")))
		}
	}
	if len(lines) == 0 {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Ratios (other server ÷ bridge, same mode and N; >1 means the bridge is better):")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| scenario | ratio | mode | N | values |")
	fmt.Fprintln(w, "|---|---|---|---:|---|")
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
}
