package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, which is 100 on every Linux we run on.
const clockTicks = 100

// ProcCPU returns the user+system CPU seconds process pid has used.
func ProcCPU(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// "pid (comm) state ppid ..." where comm may contain spaces; utime and
	// stime are fields 14 and 15, i.e. 12 and 13 after the state.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+2:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / clockTicks
}

// CPUSteal is each CPU's steal time since boot (/proc/stat): time the
// hypervisor gave another guest while this one had work there. Every
// scenario reports the steal of its span, so a run the host slowed can be
// told from a slow server.
func CPUSteal() []time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return nil
	}
	var steal []time.Duration
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		// "cpuN user nice system idle iowait irq softirq steal ..."
		if len(f) < 9 || !strings.HasPrefix(f[0], "cpu") || f[0] == "cpu" {
			continue
		}
		t, _ := strconv.ParseFloat(f[8], 64)
		steal = append(steal, time.Duration(t/clockTicks*float64(time.Second)))
	}
	return steal
}

// stealNote says how much of the span since before each CPU lost to
// other guests, "" when none lost 10 ms.
func stealNote(before, after []time.Duration) string {
	var parts []string
	lost := false
	for i := range min(len(before), len(after)) {
		d := after[i] - before[i]
		lost = lost || d >= 10*time.Millisecond
		parts = append(parts, fmt.Sprintf("cpu%d %s", i, d.Round(time.Millisecond)))
	}
	if !lost {
		return ""
	}
	return "host steal " + strings.Join(parts, ", ")
}

// ProcMem returns the resident set size and its peak (VmHWM) in bytes.
func ProcMem(pid int) (rss, peak int64) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := s.Text()
		var dst *int64
		switch {
		case strings.HasPrefix(line, "VmRSS:"):
			dst = &rss
		case strings.HasPrefix(line, "VmHWM:"):
			dst = &peak
		default:
			continue
		}
		fs := strings.Fields(line)
		if len(fs) >= 2 {
			kb, _ := strconv.ParseInt(fs[1], 10, 64)
			*dst = kb * 1024
		}
	}
	return rss, peak
}

// ResetPeak resets VmHWM to the current RSS (Linux clear_refs 5), so each
// scenario reports its own peak. It reports whether that worked.
func ResetPeak(pid int) bool {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0) == nil
}

// Sample is a reading of a server process.
type Sample struct {
	At   time.Time
	CPU  float64 // seconds
	RSS  int64
	Peak int64
}

// SampleProc reads pid's counters now.
func SampleProc(pid int) Sample {
	rss, peak := ProcMem(pid)
	return Sample{At: time.Now(), CPU: ProcCPU(pid), RSS: rss, Peak: peak}
}

// Metrics is a scrape of a Prometheus text endpoint: the sum of every
// series of each metric name.
type Metrics map[string]float64

var metricsClient = &http.Client{Timeout: 10 * time.Second}

// ScrapeMetrics fetches url and sums samples by metric name (labels
// dropped). Histograms appear as name_sum / name_count.
func ScrapeMetrics(url string) (Metrics, error) {
	resp, err := metricsClient.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("%s: %s: %s", url, resp.Status, b)
	}
	m := Metrics{}
	s := bufio.NewScanner(resp.Body)
	s.Buffer(make([]byte, 64*1024), 1024*1024)
	for s.Scan() {
		line := s.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 {
			continue
		}
		name := line[:sp]
		if b := strings.IndexByte(name, '{'); b >= 0 {
			name = name[:b]
		}
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			continue
		}
		m[strings.TrimSpace(name)] += v
	}
	return m, s.Err()
}

// ProcNice is the niceness of process pid (field 19 of /proc/PID/stat).
func ProcNice(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+2:])) // from field 3, the state
	if len(f) < 17 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	return strconv.Atoi(f[16])
}
