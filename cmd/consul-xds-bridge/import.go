package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/hashicorp/consul/api"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy/configentry"
)

// importCmd prints the policy HCL equivalent to a Consul's L7 config
// entries, read from Consul or from files `consul config read` wrote.
func importCmd(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("import", stderr)
	addr := fs.String("consul", "", "Consul HTTP address to read the entries from (default CONSUL_HTTP_ADDR or 127.0.0.1:8500; token from CONSUL_HTTP_TOKEN(_FILE))")
	mesh := fs.Bool("mesh", false, "also translate routers and splitters of http, http2 and grpc services into mesh_routes (the routes Connect sidecars' upstreams take), as the bridge does with a mesh block")
	files, code, ok := parseCommand(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	var e configentry.Entries
	// Entries of kinds the policy does not take (intentions, proxy
	// defaults, ...) are named and skipped, never the end of the import:
	// `consul config read` of a whole Consul lists them next to the rest.
	var skipped []string
	if len(files) > 0 {
		for _, f := range files {
			s, err := readEntryFile(&e, f)
			if err != nil {
				fmt.Fprintf(stderr, "import: %v\n", err)
				return 1
			}
			skipped = append(skipped, s...)
		}
	} else {
		client, err := consul.NewClient(consul.ClientConfig{Address: *addr})
		if err != nil {
			fmt.Fprintf(stderr, "import: %v\n", err)
			return 1
		}
		for _, kind := range configentry.Kinds {
			entries, _, err := client.ConfigEntries().List(kind, nil)
			if err != nil {
				fmt.Fprintf(stderr, "import: reading %s entries: %v\n", kind, err)
				return 1
			}
			for _, entry := range entries {
				if err := e.Add(entry); err != nil {
					fmt.Fprintf(stderr, "import: %v\n", err)
				}
			}
		}
	}
	e.Mesh = *mesh
	// As the daemon does: an entry the policy cannot take is left out, named.
	docs, notes, rejected := configentry.Checked(e)
	fmt.Fprintf(stdout, "# Policy translated from Consul config entries by consul-xds-bridge %s.\n", version)
	fmt.Fprintln(stdout, "# A policy that names services exports only those: add export_all_services = true to keep every other catalog service too.")
	for _, r := range rejected {
		fmt.Fprintf(stdout, "# REJECTED %s\n", r)
		fmt.Fprintf(stderr, "import: %s\n", r)
	}
	for _, s := range skipped {
		fmt.Fprintf(stdout, "# NOTE %s\n", s)
	}
	for _, n := range notes {
		fmt.Fprintf(stdout, "# NOTE %s\n", n)
	}
	for _, d := range docs {
		fmt.Fprintf(stdout, "\n# from %s\n", d.Name[len(configentry.DocPrefix):])
		stdout.Write(d.Source)
	}
	return 0
}

// maxEntryFileBytes bounds one file of config entries: a policy
// document's limit, which the policy translated from it must fit too.
const maxEntryFileBytes = policy.MaxDocumentBytes

// readEntryFile reads one entry, or a JSON list of them, as `consul config
// read -kind K -name N` prints it. Entries of kinds the policy does not
// take are returned as notes ("path: kind "name": why"); a file that is not
// entries is an error, and so is one that is not a regular file or is over
// maxEntryFileBytes (policy.ReadBoundedFile: a FIFO is refused, not
// waited on).
func readEntryFile(e *configentry.Entries, path string) (skipped []string, err error) {
	b, err := policy.ReadBoundedFile(context.Background(), path, maxEntryFileBytes)
	if errors.Is(err, policy.ErrFileTooLarge) {
		return nil, fmt.Errorf("%w; split the entries into several files (one `consul config read` each)", err)
	}
	if err != nil {
		return nil, err
	}
	raws := []json.RawMessage{b}
	if bytes.HasPrefix(bytes.TrimSpace(b), []byte("[")) {
		if err := json.Unmarshal(b, &raws); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	for _, r := range raws {
		entry, err := api.DecodeConfigEntryFromJSON(r)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if err := e.Add(entry); err != nil {
			skipped = append(skipped, fmt.Sprintf("%s: %v; skipped", path, err))
		}
	}
	return skipped, nil
}
