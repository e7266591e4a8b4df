package procstat

import (
	"os"
	"testing"
)

// TestRSS: this process's resident set is read the same by pid 0 and its
// own pid, within a factor (it moves between the reads), and is at least
// a few MiB; a process that is gone is an error.
func TestRSS(t *testing.T) {
	self, err := RSS(0)
	if err != nil {
		t.Fatal(err)
	}
	byPid, err := RSS(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if self < 1<<20 || byPid < self/2 || byPid > self*2 {
		t.Fatalf("RSS %d by self, %d by pid", self, byPid)
	}
	if _, err := RSS(1 << 30); err == nil {
		t.Fatal("no error for a process that does not exist")
	}
}
