// Package cache is the bridge's serving cache: what every xDS stream is
// served, per resource and versioned, with every resource marshalled once.
// Package serve's stream servers watch it; serve decides what each key is
// served (translations, make-before-break steps, relaying) and sets it here.
//
// go-control-plane's snapshot cache versions a whole type at a time: when
// one ClusterLoadAssignment changes, every SotW stream subscribed to any
// endpoints gets all of its subscribed endpoints again, each stream
// marshalling them itself, and every delta stream computes its diff by
// walking all resources. At a thousand edge proxies holding a thousand
// clusters each, one health flip became gigabytes of responses
// (bench/README.md). This cache serves the bridge's own SotW and delta
// servers (package serve's sotw.go and delta.go; it keeps go-control-plane's
// cache interface for the tests that drive it directly), and:
//
//   - versions each resource by the hash of its deterministic encoding
//     (go-control-plane's HashResource, so delta clients reconnecting with
//     initial_resource_versions keep what they have), and each type by a
//     hash of its names and resource versions (SotW version_info): a
//     restarted bridge or a replica serves the same versions;
//   - answers SotW EDS, RDS and SDS with only the resources the stream does
//     not hold at their current version, as the xDS protocol allows for
//     those types (LDS and CDS are full state: every response carries all
//     of them); the stream's per-resource knowledge is its (go-control-
//     plane's) Subscription.ReturnedResources, which also keeps a NACKing client
//     from being sent the version it rejected again and again;
//   - marshals each resource once per content and shares the marshalled
//     Any (and the delta Resource around it) between every stream and key
//     that serves it, and encodes a response that many streams receive at
//     one version once, only its nonce being each stream's (codec.go);
//   - compares, on an update, only the resources that changed: each type
//     set remembers its predecessor and the names that differ, and a watch
//     remembers the set it was last checked against, so a health flip costs
//     each open watch a lookup of one name, whatever the fleet holds.
//
// # What it owns
//
//   - the key of a node (keys.go: its node.cluster, marked for proxyless
//     gRPC clients) and, per key, the sets it is served, the streams that
//     announced it and the watches waiting on it (cache.go);
//   - the sets themselves (set.go: Set, Entry, NewSet, Union) and what an
//     answer sends from a set (answer.go);
//   - what a stream holds of a type (subscription.go: Subscription, the
//     versions it holds shared between streams, held.go, and the names it
//     follows interned);
//   - the fan-out of each update to the streams it answers (fanout.go);
//   - the gRPC codec the servers speak (codec.go: a response that many
//     streams receive encoded once; nodememo.go: a stream's repeated node
//     and resource names decoded once), since those shared encodings are
//     the cache's own.
//
// It knows nothing of streams, gRPC status, the tracker or the Server: it
// does not import package serve.
//
// # Locks
//
//   - Cache.mu guards every key's state and the memos inside the sets it
//     serves (shared encodings, held maps): every answer is computed and
//     handed over under it, atomically with its watch's removal.
//   - nameSets.mu guards the table of interned name sets (subscription.go);
//     nothing else is taken under it.
//   - a shared encoding's sync.Once encodes its prefix the first time a
//     sender sends it; nothing else is taken under it.
//
// Lock order, for the whole of xds/serve: Server.mu, then Cache.mu, then a
// stream's outbox.mu (and the send pool's lock). Package serve holds
// Server.mu while it sets and reads what keys are served; the cache, under
// its lock, calls nothing but what it was given to call:
//
//   - the sink a watch was made with (NewSotwWatch, NewDeltaWatch), which
//     must only queue the answer (serve's adsStream.deliver appends it to
//     the stream's outbox) and never block;
//   - the channel of a watch opened with CreateWatch or CreateDeltaWatch
//     (go-control-plane's interface), which must have room;
//   - Config.Fanned, which may observe an update's fan-out time under the
//     lock and must only record it.
//
// None of them may call back into the Cache or take Server.mu: that is the
// wall, and why the cache's lock is below Server.mu and above the
// streams'. Config.Watched is called with no lock held, and may read the
// cache.
package cache
