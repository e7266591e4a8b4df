package configentry

import (
	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/hcl/v2/hclwrite"
	"github.com/zclconf/go-cty/cty"
)

// failover writes resolver svc's failover for subset key ("*": every
// other subset) into b (the service's or the subset's block). A target
// naming another service without a subset takes that service's default
// subset, as Consul's chain compiler resolves it.
func (t *translator) failover(b *hclwrite.Body, svc, key string, fo api.ServiceResolverFailover) {
	if fo.SamenessGroup != "" || fo.Policy != nil {
		t.note(api.ServiceResolver, svc, "failover %q: sameness groups and failover policies are not translated", key)
	}
	if len(fo.Targets) > 0 {
		fb := b.AppendNewBlock("failover", nil).Body()
		for _, tg := range fo.Targets {
			if tg.Peer != "" || otherSpace(tg.Namespace, tg.Partition) != "" {
				t.note(api.ServiceResolver, svc, "failover %q: a target in a peer, partition or namespace is not translated; target dropped", key)
				continue
			}
			tb := fb.AppendNewBlock("target", nil).Body()
			t.failoverNames(tb, svc, tg.Service, tg.ServiceSubset)
			if tg.Datacenter != "" {
				tb.SetAttributeValue("datacenter", cty.StringVal(tg.Datacenter))
			}
		}
		return
	}
	if fo.Service == "" && fo.ServiceSubset == "" && len(fo.Datacenters) == 0 {
		return // Consul refuses such an entry; nothing to fail over to
	}
	if sp := otherSpace(fo.Namespace, ""); sp != "" {
		// As a target in another namespace: its one target (in each of
		// the datacenters) is elsewhere.
		t.note(api.ServiceResolver, svc, "failover %q: a target in a peer, partition or namespace (%s) is not translated; failover dropped", key, sp)
		return
	}
	fb := b.AppendNewBlock("failover", nil).Body()
	t.failoverNames(fb, svc, fo.Service, fo.ServiceSubset)
	if len(fo.Datacenters) > 0 {
		fb.SetAttributeValue("datacenters", strList(fo.Datacenters))
	}
}

// failoverNames sets a failover target's service and subset: another
// service without a subset is its resolver's default subset.
func (t *translator) failoverNames(b *hclwrite.Body, svc, service, subset string) {
	if service != "" && service != svc {
		b.SetAttributeValue("service", cty.StringVal(service))
		if r := t.e.Resolvers[service]; subset == "" && r != nil {
			subset = r.DefaultSubset
		}
	}
	if subset != "" {
		b.SetAttributeValue("subset", cty.StringVal(subset))
	}
}
