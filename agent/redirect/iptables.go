package redirect

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
)

// Runner runs iptables with args and returns its combined output.
type Runner func(ctx context.Context, args ...string) ([]byte, error)

// Exec runs the iptables binary at path ("" finds "iptables" on $PATH).
func Exec(path string) Runner {
	return func(ctx context.Context, args ...string) ([]byte, error) {
		bin := path
		if bin == "" {
			p, err := exec.LookPath("iptables")
			if err != nil {
				return nil, fmt.Errorf("iptables not found on $PATH (install Debian's iptables: apt-get install iptables): %w", err)
			}
			bin = p
		}
		return exec.CommandContext(ctx, bin, args...).CombinedOutput()
	}
}

// ErrIptables marks a failed iptables command.
var ErrIptables = errors.New("iptables failed")

func runRule(ctx context.Context, run Runner, args []string) error {
	out, err := run(ctx, args...)
	if err != nil {
		return fmt.Errorf("iptables %s: %v: %s (run as root, with CAP_NET_ADMIN): %w",
			strings.Join(args, " "), err, strings.TrimSpace(string(out)), ErrIptables)
	}
	return nil
}

// Install sets the redirection of c up: it first removes any earlier
// one (so installing again, with other settings or the same, leaves one
// set of rules), then adds Rules(c). If a rule fails, what was added is
// removed again and the error names the rule.
func Install(ctx context.Context, run Runner, c Config) error {
	if err := c.Validate(); err != nil {
		return err
	}
	if err := Remove(ctx, run); err != nil {
		return fmt.Errorf("removing the earlier rules first: %w", err)
	}
	for _, r := range Rules(c) {
		if err := runRule(ctx, run, r); err != nil {
			if rerr := Remove(ctx, run); rerr != nil {
				err = errors.Join(err, fmt.Errorf("undoing the rules added so far: %w", rerr))
			}
			return err
		}
	}
	return nil
}

// Remove takes every rule Install adds away: the jumps to the chains
// from OUTPUT and PREROUTING (whatever their matches), then the chains.
// Nothing installed is not an error.
func Remove(ctx context.Context, run Runner) error {
	listing, err := List(ctx, run)
	if err != nil {
		return err
	}
	var errs []error
	for _, rule := range listing {
		f := strings.Fields(rule)
		if len(f) < 2 || f[0] != "-A" || slices.Contains(Chains, f[1]) {
			continue
		}
		if j := slices.Index(f, "-j"); j < 0 || j+1 >= len(f) || !slices.Contains(Chains, f[j+1]) {
			continue
		}
		f[0] = "-D"
		if err := runRule(ctx, run, append([]string{"-t", "nat"}, f...)); err != nil {
			errs = append(errs, err)
		}
	}
	for _, ch := range Chains {
		if !slices.Contains(listing, "-N "+ch) {
			continue
		}
		if err := runRule(ctx, run, []string{"-t", "nat", "-F", ch}); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := runRule(ctx, run, []string{"-t", "nat", "-X", ch}); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// List is the nat table as `iptables -t nat -S` prints it, one rule or
// chain per line.
func List(ctx context.Context, run Runner) ([]string, error) {
	out, err := run(ctx, "-t", "nat", "-S")
	if err != nil {
		return nil, fmt.Errorf("iptables -t nat -S: %v: %s (run as root, with CAP_NET_ADMIN): %w", err, strings.TrimSpace(string(out)), ErrIptables)
	}
	var lines []string
	for l := range bytes.Lines(out) {
		if s := strings.TrimSpace(string(l)); s != "" {
			lines = append(lines, s)
		}
	}
	return lines, nil
}

// Ours is the part of a List that Install adds: the chains' own lines
// and the jumps to them.
func Ours(listing []string) []string {
	var out []string
	for _, l := range listing {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		mine := slices.Contains(Chains, f[1])
		if j := slices.Index(f, "-j"); j >= 0 && j+1 < len(f) && slices.Contains(Chains, f[j+1]) {
			mine = true
		}
		if mine {
			out = append(out, l)
		}
	}
	return out
}
