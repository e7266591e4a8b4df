package consul

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rs/zerolog"
)

// Limits a KVWatcher applies when its KVConfig leaves them zero. Policy is
// small text; anything near these sizes is a mistake or an attack on the
// bridge's memory, and is better reported than parsed.
const (
	DefaultMaxDocuments     = 1000
	DefaultMaxDocumentBytes = 1 << 20
)

// KVConfig configures a KVWatcher.
type KVConfig struct {
	// Client talks to the Consul agent.
	Client *api.Client
	// Prefix is watched recursively. Consul matches it as a plain string
	// prefix, so end it with "/" to mean a folder: "policy" also matches
	// "policy-old/x". It must not be empty.
	Prefix string
	// Query tunes the blocking query (datacenter, stale, wait, backoff).
	Query QueryOptions
	// MaxDocuments caps how many documents an update carries; keys past it,
	// in key order, are rejected. Zero means DefaultMaxDocuments.
	MaxDocuments int
	// MaxDocumentBytes caps one document's value; larger ones are rejected.
	// Zero means DefaultMaxDocumentBytes.
	MaxDocumentBytes int
	// Logger receives one event per query failure, recovery, index reset
	// and change in rejected keys.
	Logger zerolog.Logger
	// OnQuery, if set, is told the outcome of every Consul request, with
	// endpoint "kv_list" and datacenter "" (KV is read locally). It must
	// not block.
	OnQuery func(endpoint, datacenter string, err error, d time.Duration)
}

// KVDocument is one key under the watched prefix.
type KVDocument struct {
	Key   string
	Value []byte
	// ModifyIndex is the index of the key's last write, for showing which
	// version is active. It does not count as a change on its own: a
	// rewrite of the same value is not news.
	ModifyIndex uint64
}

// KVUpdate is the full set of documents under the prefix.
type KVUpdate struct {
	// Documents sorted by key; folder keys (ending in "/" with no value)
	// are left out. Empty when the prefix holds no documents: an update is
	// only ever sent for a successful read, never because of an error.
	Documents []KVDocument
	// Rejected lists, sorted, the keys left out for breaking a limit, each
	// as "key: reason". Documents is then not everything under the prefix,
	// so a consumer that merges them into one policy should treat a
	// non-empty Rejected as an invalid policy rather than apply a part.
	Rejected []string
	// Index is Consul's X-Consul-Index of the read that produced the update.
	Index uint64
	// ChangedAt is when the oldest Consul response folded into this update
	// returned.
	ChangedAt time.Time
}

// KVWatcher watches every key under a prefix and publishes the whole sorted
// set whenever a key is added, deleted or changes its value.
type KVWatcher struct {
	cfg     KVConfig
	updates chan KVUpdate
}

// NewKVWatcher returns a KVWatcher; nothing runs until Run.
func NewKVWatcher(cfg KVConfig) *KVWatcher {
	if cfg.MaxDocuments <= 0 {
		cfg.MaxDocuments = DefaultMaxDocuments
	}
	if cfg.MaxDocumentBytes <= 0 {
		cfg.MaxDocumentBytes = DefaultMaxDocumentBytes
	}
	return &KVWatcher{cfg: cfg, updates: make(chan KVUpdate, 1)}
}

// Updates delivers document sets. Only the newest unread one is kept: a
// slow consumer skips intermediate states but never sees them out of order.
// The first update arrives after the first successful read, even if the
// prefix is empty, so a consumer can tell "no documents" from "not read yet".
func (w *KVWatcher) Updates() <-chan KVUpdate { return w.updates }

// Run watches until ctx ends. Consul errors never end it: the query backs
// off and the last good documents stand, so an outage never looks like a
// deleted policy. It fails at once only on an empty Prefix, which would
// watch the whole KV store.
func (w *KVWatcher) Run(ctx context.Context) error {
	if w.cfg.Prefix == "" {
		return errors.New("consul kv watch: empty prefix")
	}
	log := w.cfg.Logger
	v := view[kvSet]{
		id: "kv(" + w.cfg.Prefix + ")",
		fetch: func(q *api.QueryOptions) (kvSet, *api.QueryMeta, error) {
			pairs, meta, err := w.cfg.Client.KV().List(w.cfg.Prefix, q)
			if err != nil {
				return kvSet{}, meta, err
			}
			return w.normalise(pairs), meta, nil
		},
		equal: kvSet.equal,
		opts:  w.cfg.Query,
		log:   log,
	}
	if w.cfg.OnQuery != nil {
		v.result = func(err error, d time.Duration) { w.cfg.OnQuery("kv_list", "", err, d) }
	}
	var lastRejected []string
	v.run(ctx, func(s kvSet, index uint64, at time.Time) {
		if !slices.Equal(s.rejected, lastRejected) && len(s.rejected) > 0 {
			log.Warn().Str("prefix", w.cfg.Prefix).Strs("rejected", s.rejected).Msg("kv documents rejected")
		}
		lastRejected = s.rejected
		w.publish(KVUpdate{Documents: s.docs, Rejected: s.rejected, Index: index, ChangedAt: at})
	})
	return nil
}

func (w *KVWatcher) publish(u KVUpdate) {
	publishLatest(w.updates, u, func(u *KVUpdate) *time.Time { return &u.ChangedAt })
}

// kvSet is one normalised List response.
type kvSet struct {
	docs     []KVDocument
	rejected []string
}

// normalise turns a List response into sorted documents within the limits.
// Consul's own value limit (kv_max_value_size, 512 KiB by default) may be
// raised by operators, so ours is enforced here too.
func (w *KVWatcher) normalise(pairs api.KVPairs) kvSet {
	s := kvSet{docs: []KVDocument{}}
	pairs = slices.DeleteFunc(slices.Clone(pairs), func(p *api.KVPair) bool { return p == nil })
	// Consul sends keys sorted, but the limits must not depend on that.
	slices.SortFunc(pairs, func(a, b *api.KVPair) int { return strings.Compare(a.Key, b.Key) })
	for _, p := range pairs {
		switch {
		case strings.HasSuffix(p.Key, "/") && len(p.Value) == 0:
			// Folders made by the UI or `consul kv put dir/`: not documents.
			continue
		case len(p.Value) > w.cfg.MaxDocumentBytes:
			s.rejected = append(s.rejected, fmt.Sprintf("%s: %d bytes is over the limit of %d", p.Key, len(p.Value), w.cfg.MaxDocumentBytes))
		case len(s.docs) >= w.cfg.MaxDocuments:
			s.rejected = append(s.rejected, fmt.Sprintf("%s: more than %d documents under %q", p.Key, w.cfg.MaxDocuments, w.cfg.Prefix))
		default:
			s.docs = append(s.docs, KVDocument{Key: p.Key, Value: p.Value, ModifyIndex: p.ModifyIndex})
		}
	}
	return s
}

// equal ignores ModifyIndex: Consul bumps it on every write, also one that
// stores the same value again, and that must not look like a policy change.
func (s kvSet) equal(o kvSet) bool {
	return slices.Equal(s.rejected, o.rejected) &&
		slices.EqualFunc(s.docs, o.docs, func(a, b KVDocument) bool {
			return a.Key == b.Key && bytes.Equal(a.Value, b.Value)
		})
}
