//go:build !unix

package serve

import "errors"

// rawReads is off where a socket cannot be read without blocking here:
// connections read through a pooled buffer per read instead.
const rawReads = false

// readSocket is never called without raw reads.
func readSocket(uintptr, []byte) (int, bool, error) {
	return 0, false, errors.New("raw socket reads are not supported on this system")
}
