package bridge

import (
	"syscall"
	"time"
)

// processCPU is the CPU time (user and system) the process has used: the
// cost the debounce window follows, pushes to every proxy included, which
// no wall-clock measurement of the build sees (they run on the streams'
// goroutines).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
