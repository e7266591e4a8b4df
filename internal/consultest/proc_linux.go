package consultest

import (
	"bytes"
	"fmt"
	"os"
	"syscall"
	"time"
)

// procAttr makes the kernel kill the agent if the test binary dies without
// running its cleanups (e.g. on a go test -timeout panic), so stray agents do
// not pile up holding ports.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// waitStopped waits until every thread of process pid is stopped. SIGSTOP
// only takes effect once one of the process's threads gets to handle it, and
// on a busy machine the others can go on serving requests for a while.
func waitStopped(pid int) {
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
		if allStopped(pid) {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

func allStopped(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return true // gone: nothing left to stop
	}
	for _, task := range tasks {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			continue // thread exited
		}
		// "tid (comm) state ...", where comm may itself contain ") ".
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 || i+2 >= len(stat) {
			return false
		}
		switch stat[i+2] {
		case 'T', 't', 'Z', 'X':
		default:
			return false
		}
	}
	return true
}
