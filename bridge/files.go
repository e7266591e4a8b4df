package bridge

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
)

// watchFiles asks for a reload when a configuration file changes, or a
// file the policy names: the certificates, keys and CAs of tls blocks,
// whose contents the bridge serves over SDS. It watches the files'
// directories, not the files: editors, config managers and certificate
// tools replace files by rename, which a watch on the file would lose.
// The policy's files change with the policy; the loop sends the new list
// on policyFiles after every reload.
func (d *Daemon) watchFiles(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch config files: %w", err)
	}
	defer w.Close()
	fw := &fileWatch{d: d, w: w, config: map[string]bool{}, dirs: map[string]bool{}}
	for _, f := range d.cfg.ConfigFiles {
		abs, err := filepath.Abs(f)
		if err != nil {
			return err
		}
		fw.config[abs] = true
	}
	// The configuration's directories must be watchable: without that,
	// edits would silently never apply.
	for _, dir := range slices.Sorted(maps.Keys(dirsOf(fw.config))) {
		if err := w.Add(dir); err != nil {
			return fmt.Errorf("watch config directory %s: %w", dir, err)
		}
		fw.dirs[dir] = true
	}
	fw.setPolicyFiles(policyFilePaths(d.cfg.Policy))
	// Saving a file is often several events (and a certificate rotation
	// writes two files); reload once they settle.
	settle := time.NewTimer(time.Hour)
	settle.Stop()
	defer settle.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case paths := <-d.policyFiles:
			fw.setPolicyFiles(paths)
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if name := filepath.Clean(ev.Name); fw.config[name] || fw.policy[name] {
				settle.Reset(200 * time.Millisecond)
			}
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			d.log.Warn().Err(err).Msg("config file watch error; SIGHUP still reloads")
		case <-settle.C:
			d.log.Info().Msg("configuration or TLS file changed; reloading")
			d.Reload()
		}
	}
}

// fileWatch is the set of files watchFiles reacts to and the directories
// it watches for them.
type fileWatch struct {
	d      *Daemon
	w      *fsnotify.Watcher
	config map[string]bool // absolute paths of -config files
	policy map[string]bool // absolute paths of files policies name
	dirs   map[string]bool // directories watched
}

// setPolicyFiles replaces the policy's files. A file reached through a
// symbolic link is watched at both ends, so both re-pointing the link
// (certbot's live/ directory) and rewriting its target are seen.
func (fw *fileWatch) setPolicyFiles(paths []string) {
	fw.policy = map[string]bool{}
	for _, p := range paths {
		abs, err := filepath.Abs(p)
		if err != nil {
			continue
		}
		fw.policy[abs] = true
		if target, err := filepath.EvalSymlinks(abs); err == nil && target != abs {
			fw.policy[target] = true
		}
	}
	want := dirsOf(fw.config)
	maps.Copy(want, dirsOf(fw.policy))
	for _, dir := range slices.Sorted(maps.Keys(want)) {
		if fw.dirs[dir] {
			continue
		}
		if err := fw.w.Add(dir); err != nil {
			// A missing directory is also reported by the reload that
			// cannot read the file; SIGHUP reloads once it exists.
			fw.d.log.Warn().Err(err).Str("dir", dir).Msg("cannot watch the directory of a TLS file; changes there need SIGHUP")
			continue
		}
		fw.dirs[dir] = true
	}
	for dir := range fw.dirs {
		if !want[dir] {
			_ = fw.w.Remove(dir)
			delete(fw.dirs, dir)
		}
	}
}

func dirsOf(files map[string]bool) map[string]bool {
	out := map[string]bool{}
	for f := range files {
		out[filepath.Dir(f)] = true
	}
	return out
}

// policyFilePaths lists the files the policies name (TLS files and JWT
// providers' key sets), each once.
func policyFilePaths(pols ...*policy.Policy) []string {
	seen := map[string]bool{}
	var out []string
	add := func(path string) {
		if path != "" && !seen[path] {
			seen[path] = true
			out = append(out, path)
		}
	}
	for _, p := range pols {
		for _, f := range p.Files() {
			add(f.Path)
		}
		if p == nil {
			continue
		}
		for _, pr := range p.Proxies {
			for _, l := range pr.Listeners {
				for _, f := range l.JWKSFiles {
					add(f.Path)
				}
			}
		}
	}
	return out
}

// watchPolicyFiles hands watchFiles the files of the active policy and of
// one that was just rejected (so that fixing a broken certificate file
// reloads by itself). Only the loop calls it, so after draining a stale
// list the send cannot block.
func (d *Daemon) watchPolicyFiles(pols ...*policy.Policy) {
	paths := policyFilePaths(pols...)
	select {
	case <-d.policyFiles:
	default:
	}
	d.policyFiles <- paths
}

// prepare merges the documents read and reads the files the merged
// policy names (certificates, keys, CAs, JWKS). The reload runs it off the
// loop, with the read and the parse, so that a file that is slow to read
// never holds catalog updates; policy.ReadFiles bounds every read anyway
// (regular files only, a size limit each, policy.FileReadTimeout for all).
// The certificates, keys and CAs tls blocks name are part of the policy:
// a missing or broken one rejects the reload like a broken document, and
// the last good secrets keep serving.
func (r *policyRead) prepare(now time.Time) {
	r.merged = true
	if r.diags.HasErrors() {
		return
	}
	cfg, ds := policy.Merge(r.docs...)
	r.diags = append(r.diags, ds...)
	if r.diags.HasErrors() {
		return
	}
	r.cfg = cfg
	// Keys the xDS settings would send unprotected are refused before any
	// key file is read: the reason to reject is the transport, whatever
	// the files hold.
	r.diags = append(r.diags, policy.CheckKeyTransport(r.xds, cfg.Policy)...)
	if r.diags.HasErrors() {
		return
	}
	read := (*policy.Policy).ReadFiles
	if r.readFiles != nil {
		read = r.readFiles
	}
	r.diags = append(r.diags, read(cfg.Policy, now)...)
}
