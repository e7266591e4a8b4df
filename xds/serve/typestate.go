package serve

import "time"

// typeStates is a stream's state per type, in the order its types came.
// A stream has a handful (ADS: four or five), so values searched in turn
// are smaller than a map of pointers: the map and its four states were
// ~1 KiB of every proxy's heap (S3, N = 10,000, bench/README.md). A
// pointer get or add returns is good until the next add.
type typeStates []typeState

// get is typ's state, nil if the stream has none.
func (ts typeStates) get(typ string) *typeState {
	for i := range ts {
		if ts[i].url == typ {
			return &ts[i]
		}
	}
	return nil
}

// add appends a state for typ, which must have none.
func (ts *typeStates) add(typ string) *typeState {
	if *ts == nil {
		*ts = make(typeStates, 0, 4) // ADS: CDS, EDS, LDS, RDS
	}
	*ts = append(*ts, typeState{url: canonicalType(typ)})
	return &(*ts)[len(*ts)-1]
}

// stamp is a time as its offset from the tracker's epoch (monotonic when
// the time is), 0 for none: 8 bytes where a time.Time is 24, twice for
// every type of every stream.
type stamp int64

func (t *tracker) stamp(now time.Time) stamp {
	if d := stamp(now.Sub(t.epoch)); d != 0 {
		return d
	}
	return 1
}

func (t *tracker) time(s stamp) time.Time {
	if s == 0 {
		return time.Time{}
	}
	return t.epoch.Add(time.Duration(s))
}

type typeState struct {
	url                    string // the type URL (canonicalType's)
	sentVersion, sentNonce string
	sentAt                 stamp
	sentResources          int32 // in the last response
	// nameBytes is the size of the names subscribed (an upper bound for
	// delta: duplicates are counted again); at most maxNameBytesPerStream.
	// Two int32s in one word (see acked).
	nameBytes int32
	// got holds the expected endpoints (tracker.expect) this stream was
	// sent, for expectation expectGen.
	got          map[string]bool
	expectGen    uint64
	ackedVersion string
	ackedAt      stamp
	lastNACK     *NACKInfo
	// acked and nacked: the last response was ACKed, or stands rejected.
	// Flags rather than the nonces (which are the sent one's when set):
	// 32 bytes less keeps a stream's four states in a 480-byte object,
	// where a pointerful one over 512 bytes costs a header and a larger
	// size class (640).
	acked, nacked bool
}

// answered: the last response was ACKed or NACKed, or nothing was sent
// (what comparing the acked and nacked nonces with the sent one, all
// empty, said before).
func (ts *typeState) answered() bool { return ts.sentNonce == "" || ts.acked || ts.nacked }

// status is the type's status when its last response was sent sinceSent
// ago.
func (ts *typeState) status(sinceSent, staleAfter time.Duration) string {
	switch {
	case ts.sentNonce == "":
		if ts.ackedVersion != "" {
			return StatusSynced // holds a version from a previous stream
		}
		return StatusNotSent
	case ts.nacked:
		return StatusNACKed
	case ts.acked:
		return StatusSynced
	case sinceSent > staleAfter:
		return StatusStale
	}
	return StatusPending
}
