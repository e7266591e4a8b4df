package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// parseAnywhere parses fs's flags wherever they stand among the arguments
// (`validate f.hcl -catalog x.json` as well as `validate -catalog x.json
// f.hcl`), as operators type them, and returns the other arguments in
// order. After "--" everything is an argument, so a file whose name starts
// with "-" can still be named.
func parseAnywhere(fs *flag.FlagSet, args []string) ([]string, error) {
	var rest []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return rest, nil
		}
		// flag stops at the first non-flag, or after "--": tell them apart
		// by what it consumed.
		consumed := len(args) - fs.NArg()
		if consumed > 0 && args[consumed-1] == "--" {
			return append(rest, fs.Args()...), nil
		}
		rest = append(rest, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// configPaths is a repeatable -config flag: a FILE, or a DIR standing for
// the *.hcl files in it, in name order (as Consul and Nomad read a
// configuration directory: 00-base.hcl before 10-edge.hcl).
type configPaths []string

func (c *configPaths) String() string { return strings.Join(*c, ",") }
func (c *configPaths) Set(v string) error {
	files, err := expandConfig(v)
	if err != nil {
		return err
	}
	*c = append(*c, files...)
	return nil
}

// expandConfig is path itself, or the *.hcl files of the directory path
// names, sorted. A directory without one is an error: the daemon would
// otherwise start with no configuration at all.
func expandConfig(path string) ([]string, error) {
	fi, err := os.Stat(path)
	if err != nil || !fi.IsDir() {
		return []string{path}, nil // a file; reading it reports what is wrong
	}
	files, err := filepath.Glob(filepath.Join(path, "*.hcl"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("directory %s has no *.hcl file: put the configuration in files named *.hcl there, or name a file", path)
	}
	sort.Strings(files)
	return files, nil
}

// expandConfigs is expandConfig of each path, in order.
func expandConfigs(paths []string) ([]string, error) {
	var out []string
	for _, p := range paths {
		files, err := expandConfig(p)
		if err != nil {
			return nil, err
		}
		out = append(out, files...)
	}
	return out, nil
}
