package main

import (
	"errors"
	"flag"
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

// usageExit is the exit code of a subcommand whose flags did not parse:
// 0 for -h (the help the operator asked for is printed), 2 otherwise.
func usageExit(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 2
}
