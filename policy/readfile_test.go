package policy_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
)

func TestReadBoundedFile(t *testing.T) {
	dir := t.TempDir()
	regular := filepath.Join(dir, "ok.pem")
	if err := os.WriteFile(regular, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	sparse := filepath.Join(dir, "sparse")
	if f, err := os.Create(sparse); err != nil {
		t.Fatal(err)
	} else {
		if err := f.Truncate(1 << 30); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink("/dev/zero", link); err != nil {
		t.Fatal(err)
	}
	fifoLink := filepath.Join(dir, "fifolink")
	if err := os.Symlink(fifo, fifoLink); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		path string
		want error
		text string
	}{
		"regular file":         {path: regular},
		"/dev/zero":            {path: "/dev/zero", want: policy.ErrNotRegularFile, text: "a character device"},
		"link to /dev/zero":    {path: link, want: policy.ErrNotRegularFile, text: "a character device"},
		"FIFO":                 {path: fifo, want: policy.ErrNotRegularFile, text: "a FIFO"},
		"link to a FIFO":       {path: fifoLink, want: policy.ErrNotRegularFile, text: "a FIFO"},
		"1 GB sparse file":     {path: sparse, want: policy.ErrFileTooLarge, text: "1073741824 bytes, over the limit of 1048576"},
		"directory":            {path: dir, want: policy.ErrNotRegularFile, text: "a directory"},
		"missing":              {path: filepath.Join(dir, "nope"), want: os.ErrNotExist},
		"just over the bound":  {path: regular, want: policy.ErrFileTooLarge},
		"exactly at the bound": {path: regular},
	} {
		t.Run(name, func(t *testing.T) {
			max := int64(policy.MaxPEMFileBytes)
			switch name {
			case "just over the bound":
				max = 4
			case "exactly at the bound":
				max = 5
			}
			start := time.Now()
			b, err := policy.ReadBoundedFile(context.Background(), tc.path, max)
			if took := time.Since(start); took > 500*time.Millisecond {
				t.Errorf("took %v; refusals must be immediate", took)
			}
			if tc.want == nil {
				if err != nil || string(b) != "hello" {
					t.Fatalf("got %q, %v; want the contents", b, err)
				}
				return
			}
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.path) || !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("got %v; want %v naming %s and saying %q", err, tc.want, tc.path, tc.text)
			}
			if b != nil {
				t.Fatalf("returned %d bytes with an error", len(b))
			}
		})
	}
}
