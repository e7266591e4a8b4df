package consul

import (
	"fmt"
	"reflect"
	"testing"
	"time"
)

// TestPublishEndpointsIsPublishAll: an endpoint-only publish, built from
// the last one, is the update a full publish builds from every watch
// (the same catalog, service objects included), and a change that is not
// (a new watch, a target never read) is published in full.
func TestPublishEndpointsIsPublishAll(t *testing.T) {
	svc := func(name, dc string, status Status) *Service {
		return &Service{Name: name, Datacenter: dc, Instances: []Instance{{ID: name + "-1", Node: "n1", Address: "10.0.0.1", Port: 80, Status: status}}}
	}
	watches := map[ServiceKey]*healthWatch{}
	for i := range 50 {
		k := ServiceKey{Name: fmt.Sprintf("svc-%02d", i)}
		if i%7 == 0 {
			k.Datacenter = "dc2"
		}
		watches[k] = &healthWatch{data: svc(k.Name, k.Datacenter, StatusPassing)}
	}
	watches[ServiceKey{Name: "pending"}] = &healthWatch{}
	watches[ServiceKey{Datacenter: "dc3", Name: "far"}] = &healthWatch{data: &Service{Name: "far", Datacenter: "dc3", Instances: []Instance{}}, unreachable: true}
	w := NewWatcher(Config{})
	skipped := []string{"bad name"}
	w.skipped.Store(&skipped)
	w.publish(watches, true, time.Time{}, Change{})
	<-w.Updates()

	flip := func(k ServiceKey, st Status) Change {
		watches[k] = &healthWatch{data: svc(k.Name, k.Datacenter, st)}
		return endpointChange(k)
	}
	steps := []struct {
		what        string
		change      func() Change
		incremental bool
	}{
		{"one flip", func() Change { return flip(ServiceKey{Name: "svc-03"}, StatusCritical) }, true},
		{"two flips, one remote", func() Change {
			return flip(ServiceKey{Name: "svc-05"}, StatusWarning).Merge(flip(ServiceKey{Datacenter: "dc2", Name: "svc-07"}, StatusCritical))
		}, true},
		{"a new watch claimed as endpoints", func() Change {
			k := ServiceKey{Name: "new"}
			watches[k] = &healthWatch{data: svc("new", "", StatusPassing)}
			return endpointChange(k)
		}, false},
		{"a new watch beside a flip that alone is named", func() Change {
			watches[ServiceKey{Name: "new2"}] = &healthWatch{data: svc("new2", "", StatusPassing)}
			return flip(ServiceKey{Name: "svc-09"}, StatusCritical)
		}, false},
		{"a flip after it", func() Change { return flip(ServiceKey{Name: "svc-03"}, StatusPassing) }, true},
		{"the pending target claimed as endpoints", func() Change { return endpointChange(ServiceKey{Name: "pending"}) }, false},
	}
	for _, step := range steps {
		change := step.change()
		if _, ok := w.publishEndpoints(watches, change); ok != step.incremental {
			t.Fatalf("%s: built from the last publish: %v, want %v", step.what, ok, step.incremental)
		}
		want := NewWatcher(Config{})
		want.skipped.Store(&skipped)
		full := want.publishAll(watches, true)
		w.publish(watches, true, time.Time{}, change)
		got := <-w.Updates()
		if got.Changed.EndpointsOnly() != change.EndpointsOnly() {
			t.Fatalf("%s: Changed %+v", step.what, got.Changed)
		}
		got.Changed = Change{}
		if !reflect.DeepEqual(got, full) {
			t.Fatalf("%s: endpoint-only publish\n%+v\nwant\n%+v", step.what, got, full)
		}
		for i := range full.Catalog.Services {
			if got.Catalog.Services[i] != full.Catalog.Services[i] {
				t.Fatalf("%s: service %s is another object", step.what, full.Catalog.Services[i].Name)
			}
		}
	}
}
