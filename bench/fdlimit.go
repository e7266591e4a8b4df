package bench

import "syscall"

// RaiseFileLimit raises this process's open-file limit to at least want,
// the hard limit too where the process may (root); the servers it starts
// inherit it. Each simulated proxy holds a connection of its own, as an
// Envoy does, so 20,000 of them need 20,000 descriptors in the load
// generator and as many in the server under test, past the 20,000 this
// machine allows by default. It returns the limit now in force, and the
// error of raising the hard limit when that was refused (then the soft
// limit is raised to the hard one).
func RaiseFileLimit(want uint64) (uint64, error) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, err
	}
	if l.Cur >= want {
		return l.Cur, nil
	}
	n := syscall.Rlimit{Cur: want, Max: max(l.Max, want)}
	err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &n)
	if err == nil {
		return want, nil
	}
	n = syscall.Rlimit{Cur: l.Max, Max: l.Max}
	if serr := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &n); serr != nil {
		return l.Cur, err
	}
	return l.Max, err
}
