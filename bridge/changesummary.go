package bridge

import (
	"slices"
	"time"

	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/rs/zerolog"
)

// changeSummaryEvery is how often, at most, the info-level summary of the
// snapshots served since the last one is logged.
const changeSummaryEvery = time.Minute

// changeSummary counts the snapshots served between two info-level
// summaries. Every change is logged at debug ("snapshot updated"); a
// fleet's endpoint churn would otherwise fill an info log with one line
// per health flap. A change of anything but endpoints (a policy reload,
// a new service) is rare and is also logged at info as it happens.
type changeSummary struct {
	since     time.Time // first change counted, zero when none
	snapshots int
	types     []string
	maxBuild  time.Duration
}

// add counts one served change, and logs the summary at info once
// changeSummaryEvery has passed since the first change it counts.
func (s *changeSummary) add(log zerolog.Logger, now time.Time, types []string, build time.Duration) {
	if s.since.IsZero() {
		s.since = now
	}
	s.snapshots++
	for _, t := range types {
		if !slices.Contains(s.types, t) {
			s.types = append(s.types, t)
		}
	}
	s.maxBuild = max(s.maxBuild, build)
	if now.Sub(s.since) < changeSummaryEvery {
		return
	}
	slices.Sort(s.types)
	log.Info().Int("snapshots", s.snapshots).Strs("types", s.types).Dur("max_build", s.maxBuild).
		Dur("over", now.Sub(s.since)).Msg("snapshots updated")
	*s = changeSummary{}
}

// onlyEndpoints says whether a change touched nothing but endpoints.
func onlyEndpoints(types []string) bool {
	for _, t := range types {
		if t != resourcev3.EndpointType {
			return false
		}
	}
	return true
}
