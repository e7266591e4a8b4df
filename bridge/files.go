package bridge

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// watchFiles asks for a reload when a configuration file changes. It
// watches the files' directories, not the files: editors and config
// managers replace files by rename, which a watch on the file would lose.
func (d *Daemon) watchFiles(ctx context.Context) error {
	if len(d.cfg.ConfigFiles) == 0 {
		return nil
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch config files: %w", err)
	}
	defer w.Close()
	files := map[string]bool{}
	dirs := map[string]bool{}
	for _, f := range d.cfg.ConfigFiles {
		abs, err := filepath.Abs(f)
		if err != nil {
			return err
		}
		files[abs] = true
		dirs[filepath.Dir(abs)] = true
	}
	for dir := range dirs {
		if err := w.Add(dir); err != nil {
			return fmt.Errorf("watch config directory %s: %w", dir, err)
		}
	}
	// Saving a file is often several events; reload once they settle.
	settle := time.NewTimer(time.Hour)
	settle.Stop()
	defer settle.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if files[filepath.Clean(ev.Name)] {
				settle.Reset(200 * time.Millisecond)
			}
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			d.log.Warn().Err(err).Msg("config file watch error; SIGHUP still reloads")
		case <-settle.C:
			d.log.Info().Msg("configuration file changed; reloading")
			d.Reload()
		}
	}
}
