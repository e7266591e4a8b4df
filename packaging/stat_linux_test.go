package packaging

import (
	"os"
	"strconv"
	"syscall"
	"testing"
)

func fileGID(t *testing.T, p string) string {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return strconv.Itoa(int(fi.Sys().(*syscall.Stat_t).Gid))
}
