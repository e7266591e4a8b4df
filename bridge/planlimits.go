package bridge

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
)

// maxPlanBody bounds a pasted policy document like a KV document; the
// JSON around it (escapes) may take as much again.
const maxPlanBody = consul.DefaultMaxDocumentBytes

const (
	// planReadTimeout bounds how long a client may take to send a plan
	// request's body; a slow sender holds a connection, never the plan
	// slot.
	planReadTimeout = 10 * time.Second
	// planWait is how long a plan waits for the one running before it is
	// refused with 429.
	planWait = 2 * time.Second
)

// planRequest is the body of POST /v1/plan.
type planRequest struct {
	// Name is the source the document is planned as (default
	// console.hcl; the query's ?name= if the body has none).
	Name string `json:"name"`
	// Document is the policy document, HCL.
	Document string `json:"document"`
}

// readPlanRequest reads and decodes a plan request within
// planReadTimeout and the size bounds; on error it also says the status.
func readPlanRequest(w http.ResponseWriter, r *http.Request) (*planRequest, int, error) {
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(planReadTimeout))
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 2*maxPlanBody))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("the request is over %d bytes; a policy document may have %d", 2*maxPlanBody, maxPlanBody)
	case err != nil:
		return nil, http.StatusRequestTimeout, fmt.Errorf("reading the plan request: %w (the body must arrive within %s)", err, planReadTimeout)
	}
	var req planRequest
	if err := json.Unmarshal(b, &req); err != nil {
		return nil, http.StatusBadRequest, fmt.Errorf(`the plan request is not JSON {"name": "...", "document": "..."}: %w`, err)
	}
	if len(req.Document) > maxPlanBody {
		return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("the document has %d bytes, over the %d a policy document may have", len(req.Document), maxPlanBody)
	}
	if req.Name == "" {
		req.Name = r.URL.Query().Get("name")
	}
	if req.Name == "" {
		req.Name = "console.hcl"
	}
	return &req, 0, nil
}

// acquirePlan takes the plan slot, waiting at most planWait; release
// frees it.
func (d *Daemon) acquirePlan() (release func(), ok bool) {
	t := d.clock.NewTimer(planWait)
	defer t.Stop()
	select {
	case d.planSlot <- struct{}{}:
		return func() { <-d.planSlot }, true
	case <-t.Chan():
		return nil, false
	}
}

// planFiles gives a planned policy the contents of the files it names
// (certificates, keys, CAs, JWKS) without reading any: a file the
// running policy already uses keeps the contents the daemon read for
// it; any other is an error saying so. Reading what a posted document
// names would tell whoever posts it about the bridge's disk (whether
// /etc/shadow exists, whether it is readable) and let it make the bridge
// read /dev/zero or a FIFO; the answer here is the same whatever the
// path is.
func planFiles(planned, active *policy.Policy) hcl.Diagnostics {
	type key struct {
		path string
		kind policy.PEMKind
	}
	pems := map[key]*policy.PEMFile{}
	for _, f := range active.Files() {
		if f.PEM != nil {
			pems[key{f.Path, f.Kind}] = f
		}
	}
	jwks := map[string]string{}
	for _, p := range activeProxies(active) {
		for _, l := range p.Listeners {
			for _, f := range l.JWKSFiles {
				if f.Provider < len(l.HTTP.JWTProviders) {
					jwks[f.Path] = l.HTTP.JWTProviders[f.Provider].LocalJWKS
				}
			}
		}
	}
	var diags hcl.Diagnostics
	notRead := func(path string, rng hcl.Range) {
		diags = append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "File not read by the admin API",
			Detail: fmt.Sprintf("%s is not a file the running policy uses, and a plan posted to the admin API reads no file a document names. "+
				"Plan it on the bridge's host with `consul-xds-bridge plan`, which reads files as you.", path),
			Subject: rng.Ptr(),
		})
	}
	for _, f := range planned.Files() {
		if old, ok := pems[key{f.Path, f.Kind}]; ok {
			f.PEM = old.PEM
		} else {
			notRead(f.Path, f.Range)
		}
	}
	for _, p := range activeProxies(planned) {
		for _, l := range p.Listeners {
			for _, f := range l.JWKSFiles {
				if v, ok := jwks[f.Path]; ok && f.Provider < len(l.HTTP.JWTProviders) {
					l.HTTP.JWTProviders[f.Provider].LocalJWKS = v
				} else {
					notRead(f.Path, f.Range)
				}
			}
		}
	}
	return diags
}

func activeProxies(p *policy.Policy) []*policy.Proxy {
	if p == nil {
		return nil
	}
	return p.Proxies
}
