package main

import (
	"bufio"
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The README and docs/ are the product's manual (issue 43): these tests
// keep their links working and their commands runnable.

// repoRoot is the repository, seen from this package's directory.
const repoRoot = "../.."

// docFiles are the Markdown files whose links and commands are checked:
// the README, CONTRIBUTING.md, every page under docs/ and the READMEs of
// bench/ and examples/.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md", "CONTRIBUTING.md", "SECURITY.md", "bench/README.md"}
	for _, dir := range []string{"docs", "examples"} {
		err := filepath.WalkDir(filepath.Join(repoRoot, dir), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && (d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			if !d.IsDir() && strings.HasSuffix(p, ".md") {
				rel, err := filepath.Rel(repoRoot, p)
				if err != nil {
					return err
				}
				files = append(files, filepath.ToSlash(rel))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(files)
	return files
}

// mdLine is a line of a Markdown file with whether it stands in a fenced
// code block and that block's language.
type mdLine struct {
	n     int
	text  string
	fence string // "" outside a fenced block; else its info string, or "-" for none
}

func readMarkdown(t *testing.T, rel string) []mdLine {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, rel))
	if err != nil {
		t.Fatal(err)
	}
	var out []mdLine
	fence := ""
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			if fence == "" {
				fence = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "```"))
				if fence == "" {
					fence = "-"
				}
			} else {
				fence = ""
			}
			continue
		}
		out = append(out, mdLine{n: n, text: l, fence: fence})
	}
	return out
}

var (
	linkRE       = regexp.MustCompile(`\]\(([^)\s]+)\)|<img [^>]*src="([^"]+)"`)
	codeSpanRE   = regexp.MustCompile("`[^`]*`")
	headingRE    = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
	anchorDropRE = regexp.MustCompile(`[^\p{L}\p{N} _-]`)
)

// anchors are the fragment ids GitHub gives a file's headings: lower
// case, punctuation dropped, spaces as hyphens, repeats numbered.
func anchors(lines []mdLine) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, l := range lines {
		m := headingRE.FindStringSubmatch(l.text)
		if l.fence != "" || m == nil {
			continue
		}
		id := strings.ReplaceAll(anchorDropRE.ReplaceAllString(strings.ToLower(m[2]), ""), " ", "-")
		if k := seen[id]; k > 0 {
			out[id+"-"+strconv.Itoa(k)] = true
		} else {
			out[id] = true
		}
		seen[id]++
	}
	return out
}

// links are the relative link targets of a file, outside code.
func links(lines []mdLine) (out []struct {
	n      int
	target string
}) {
	for _, l := range lines {
		if l.fence != "" {
			continue
		}
		for _, m := range linkRE.FindAllStringSubmatch(codeSpanRE.ReplaceAllString(l.text, ""), -1) {
			out = append(out, struct {
				n      int
				target string
			}{l.n, m[1] + m[2]})
		}
	}
	return out
}

// TestDocsLinksResolve checks that every relative link in the README and
// docs/ names a file or directory of the repository, and every #fragment
// a heading of the Markdown file it points into.
func TestDocsLinksResolve(t *testing.T) {
	files := docFiles(t)
	parsed := map[string][]mdLine{}
	for _, f := range files {
		parsed[f] = readMarkdown(t, f)
	}
	checked := 0
	for _, f := range files {
		for _, l := range links(parsed[f]) {
			target := l.target
			if regexp.MustCompile(`^[a-z][a-z0-9+.-]*:`).MatchString(target) {
				continue // https:, mailto:
			}
			checked++
			p, frag, _ := strings.Cut(target, "#")
			dest := f
			if p != "" {
				dest = filepath.ToSlash(filepath.Join(filepath.Dir(f), p))
				if strings.HasPrefix(dest, "../") {
					t.Errorf("%s:%d: %s leaves the repository", f, l.n, target)
					continue
				}
				if _, err := os.Stat(filepath.Join(repoRoot, dest)); err != nil {
					t.Errorf("%s:%d: link %s: %s does not exist", f, l.n, target, dest)
					continue
				}
			}
			if frag == "" || !strings.HasSuffix(dest, ".md") {
				continue
			}
			lines, ok := parsed[dest]
			if !ok {
				lines = readMarkdown(t, dest)
				parsed[dest] = lines
			}
			if !anchors(lines)[frag] {
				t.Errorf("%s:%d: link %s: %s has no heading #%s", f, l.n, target, dest, frag)
			}
		}
	}
	if checked < 50 {
		t.Fatalf("checked only %d links: is the link pattern still right?", checked)
	}
}

// TestDocsEveryPageLinked checks that every page under docs/ is reachable
// from the README: linked from it, or from the docs index it links.
func TestDocsEveryPageLinked(t *testing.T) {
	linked := map[string]bool{}
	for _, from := range []string{"README.md", "docs/README.md"} {
		for _, l := range links(readMarkdown(t, from)) {
			p, _, _ := strings.Cut(l.target, "#")
			if p != "" {
				linked[filepath.ToSlash(filepath.Join(filepath.Dir(from), p))] = true
			}
		}
	}
	if !linked["docs/README.md"] {
		t.Fatal("the README does not link the docs index, docs/README.md")
	}
	for _, f := range docFiles(t) {
		if strings.HasPrefix(f, "docs/") && !linked[f] {
			t.Errorf("%s is linked from neither README.md nor docs/README.md", f)
		}
	}
}

// subcommandFlags runs `consul-xds-bridge SUB -h` and returns the flags it
// lists, or ok false when SUB is no subcommand.
func subcommandFlags(t *testing.T, sub string) (flags map[string]bool, ok bool) {
	t.Helper()
	if sub == "version" || sub == "help" {
		return map[string]bool{}, true
	}
	if _, ok := commands[sub]; !ok {
		return nil, false
	}
	var stdout, stderr bytes.Buffer
	if code := realMain(append(strings.Fields(sub), "-h"), &stdout, &stderr); code != 0 {
		t.Fatalf("consul-xds-bridge %s -h: exit %d: %s", sub, code, stderr.String())
	}
	flags = map[string]bool{"h": true, "help": true}
	for _, m := range regexp.MustCompile(`(?m)^  -([A-Za-z0-9][A-Za-z0-9_.-]*)`).FindAllStringSubmatch(stdout.String(), -1) {
		flags[m[1]] = true
	}
	if len(flags) < 3 {
		t.Fatalf("consul-xds-bridge %s -h listed no flags:\n%s", sub, stdout.String())
	}
	return flags, true
}

// shellBlocks are the info strings of the fenced blocks that hold commands.
var shellBlocks = map[string]bool{"sh": true, "shell": true, "bash": true, "console": true}

// TestDocsCommandsExist checks every `consul-xds-bridge SUB ...` line of
// the README's and docs' shell blocks: SUB must be a subcommand and every
// -flag one of its flags, as `consul-xds-bridge SUB -h` lists them.
func TestDocsCommandsExist(t *testing.T) {
	cache := map[string]map[string]bool{}
	checked := 0
	for _, f := range docFiles(t) {
		lines := readMarkdown(t, f)
		for i := 0; i < len(lines); i++ {
			l := lines[i]
			if !shellBlocks[l.fence] {
				continue
			}
			cmd := strings.TrimSpace(l.text)
			for strings.HasSuffix(cmd, `\`) && i+1 < len(lines) && lines[i+1].fence == l.fence {
				i++
				cmd = strings.TrimSuffix(cmd, `\`) + " " + strings.TrimSpace(lines[i].text)
			}
			cmd = strings.TrimPrefix(cmd, "$ ")
			cmd = strings.TrimPrefix(cmd, "sudo ")
			if !strings.HasPrefix(cmd, "consul-xds-bridge ") {
				continue
			}
			if c, _, ok := strings.Cut(cmd, "#"); ok {
				cmd = c
			}
			// A $(...) substitution is another command: its flags are not ours.
			cmd = regexp.MustCompile(`\$\([^)]*\)`).ReplaceAllString(cmd, "VALUE")
			words := strings.Fields(cmd)[1:]
			if len(words) == 0 {
				continue
			}
			sub := words[0]
			if sub == "agent" && len(words) > 1 && words[1] == "redirect-traffic" {
				sub, words = "agent redirect-traffic", words[1:]
			}
			flags, ok := cache[sub]
			if !ok {
				if flags, ok = subcommandFlags(t, sub); !ok {
					t.Errorf("%s:%d: %q is no consul-xds-bridge subcommand", f, l.n, sub)
					continue
				}
				cache[sub] = flags
			}
			checked++
			for _, w := range words[1:] {
				if w == "|" || strings.HasPrefix(w, ">") || w == "&&" || w == ";" {
					break // the rest is another command or a redirection
				}
				w = strings.Trim(w, "[]()|")
				if !strings.HasPrefix(w, "-") || w == "-" {
					continue
				}
				name, _, _ := strings.Cut(strings.TrimLeft(w, "-"), "=")
				if !flags[name] {
					t.Errorf("%s:%d: consul-xds-bridge %s has no flag -%s", f, l.n, sub, name)
				}
			}
		}
	}
	if checked < 10 {
		t.Fatalf("checked only %d command lines: is the pattern still right?", checked)
	}
}
