// Package procstat reads a process's resident set from /proc, for the
// tests that bound the memory of a process under test (a hostile input
// must not make it read a file whole or hold an unbounded state).
package procstat

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// RSS is the VmRSS of process pid (0: this process) in bytes; an error
// once the process is gone or where /proc has no VmRSS (not Linux).
func RSS(pid int) (int64, error) {
	path := "/proc/self/status"
	if pid != 0 {
		path = fmt.Sprintf("/proc/%d/status", pid)
	}
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%s: VmRSS %q: %w", path, v, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("%s: no VmRSS", path)
}
