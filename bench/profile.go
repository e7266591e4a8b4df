package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
)

// profileSeconds is how long an S2 profile samples: long enough for a few
// hundred flips at N = 1000, short enough not to dominate a run.
const profileSeconds = 15

// startProfile fetches a CPU profile of t into dir and closes the returned
// channel when it is written (or failed; the error is reported there).
// It returns nil when there is nothing to profile.
func startProfile(ctx context.Context, t *Target, dir, name string) <-chan error {
	if dir == "" || t.ProfileURL == "" {
		return nil
	}
	done := make(chan error, 1)
	go func() {
		done <- fetchProfile(ctx, t.ProfileURL, t.AdminToken, filepath.Join(dir, name+".pprof"))
		close(done)
	}()
	return done
}

// snapshotAllocs saves t's allocation profile (cumulative since start) into
// dir as name.allocs: S2 takes one before and one after its flips, and
// `go tool pprof -base` of the two is what the flips allocated.
func snapshotAllocs(ctx context.Context, t *Target, dir, name string) {
	if dir == "" || t.ProfileURL == "" {
		return
	}
	url := strings.TrimSuffix(t.ProfileURL, "/profile") + "/allocs"
	if err := fetch(ctx, url, t.AdminToken, filepath.Join(dir, name+".allocs")); err != nil {
		fmt.Fprintf(os.Stderr, "S2 allocations: %v\n", err)
	}
}

func fetchProfile(ctx context.Context, url, token, path string) error {
	return fetch(ctx, fmt.Sprintf("%s?seconds=%d", url, profileSeconds), token, path)
}

// fetch saves what url answers into path, with the admin API's bearer
// token when there is one.
func fetch(ctx context.Context, url, token, path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	resp, err := adminGet(ctx, url, token)
	if err != nil {
		return fmt.Errorf("profile: %w (is admin.pprof on?)", err)
	}
	defer resp.Body.Close()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// adminGet GETs url with the admin API's bearer token when there is one;
// an answer other than 200 is an error (its body closed).
func adminGet(ctx context.Context, url, token string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	return resp, nil
}

// profiling reports whether the profile behind done is still being taken.
func profiling(done <-chan error) bool {
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}
