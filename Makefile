# The two commands users need: `make run` (demo on a local Consul) and
# `make test` (everything, including integration tests on a real Consul).

GO       ?= go
TOOLS    := $(CURDIR)/.tools/bin
CONSUL   := $(TOOLS)/consul
BIN      := $(CURDIR)/bin/consul-xds-bridge
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT   ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
LDFLAGS  := -X main.version=$(VERSION) -X main.commit=$(COMMIT)
# The package's version, which dpkg orders (0.3.1 on tag v0.3.1, then
# 0.3.2~git<time>.<n>.g<hash>), its binary and the pinned packager.
PKGVERSION ?= $(shell ./packaging/version.sh 2>/dev/null || echo 0.0.0)
PKGBIN   ?= $(CURDIR)/bin/pkg/consul-xds-bridge
NFPM_VERSION := v2.48.0
NFPM     ?= $(TOOLS)/nfpm-$(NFPM_VERSION)
# Integration tests start several Consul agents; keep them from starving on 2 cores.
TESTFLAGS ?= -count=1 -timeout 20m

.PHONY: envoy-api-122 race-serve all build consul node-deps chromium iptables deb-tools nfpm test unit vet fmt-check route-test run clean package package-bin

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/consul-xds-bridge

consul: $(CONSUL)

$(CONSUL): scripts/install-consul.sh
	./scripts/install-consul.sh

# grpc-node, the second real xDS client of the proxyless gRPC tests, from
# the committed lock file into .tools/node (npm ci). Fails under CI=true
# when it cannot be installed; elsewhere the tests that need it skip.
node-deps:
	./scripts/install-grpc-node.sh

# Debian's chromium for the console's browser tests (chromedp). Fails
# under CI=true when it cannot be installed; elsewhere those tests skip.
chromium:
	./scripts/install-chromium.sh

# Debian's iptables (and ip) for the transparent-proxy tests, which run
# `agent redirect-traffic` in network namespaces they create (as root).
# Fails under CI=true when it cannot be installed; elsewhere those tests
# skip.
iptables:
	./scripts/install-iptables.sh

# Debian's lintian, systemd-analyze and systemd-sysusers for the packaging
# tests (packaging/). Fails under CI=true when it cannot install them;
# elsewhere those tests skip.
deb-tools:
	./scripts/install-debtools.sh

# nfpm, the packager, built from its Go module at a pinned version.
nfpm: $(NFPM)

$(NFPM):
	NFPM_VERSION=$(NFPM_VERSION) ./scripts/install-nfpm.sh $(TOOLS)

# Everything: vet, formatting, the sample policy's route tests, unit and
# integration tests against a real Consul (with grpc-go and grpc-node as
# proxyless clients, Chromium for the console, iptables for
# redirect-traffic, and the Debian package built, linted, scored and
# installed into a throwaway root).
test: consul node-deps chromium iptables deb-tools nfpm fmt-check vet route-test race-serve envoy-api-122
	CONSUL_BIN=$(CONSUL) NFPM=$(NFPM) $(GO) test $(TESTFLAGS) ./...

# What the bridge serves a node claiming Envoy 1.22 (the oldest it
# supports), decoded with Envoy 1.22's API: go-control-plane at the version
# Consul 1.15.4 was built with, in a module of its own
# (internal/envoyapi122; ./... does not reach into it). Its fixtures are
# checked against the translation by xds's TestEnvoy122Fixtures.
envoy-api-122:
	cd internal/envoyapi122 && $(GO) vet ./... && $(GO) test $(TESTFLAGS) ./...

# The xDS servers under the race detector: their streams share state
# between a stream's reader, its sender, the cache's fan-out and the
# admin API (about 15 s).
race-serve:
	$(GO) test -race $(TESTFLAGS) ./xds/serve/

# The edge gateway sample's route tests, as a CI pipeline runs them before
# a policy is pushed (no Consul needed).
route-test:
	$(GO) run ./cmd/consul-xds-bridge test -catalog examples/policies/edge-gateway.catalog.json \
		examples/policies/edge-gateway.hcl examples/policies/edge-gateway.test.hcl

# Fast feedback without Consul (integration tests skip unless CI=true).
unit:
	$(GO) test -count=1 -short ./...

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(find . -name '*.go' -not -path './.tools/*' -not -path './.git/*')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

run: build consul
	$(GO) run ./examples/demo -consul-bin $(CONSUL) -bridge $(BIN) -config config.hcl

# The Debian package (stripped PIE binary, the bridge's and the agent's
# systemd units, default config, system user, manual page, samples) into
# dist/, built by nfpm. Its version is release-style and ordered by dpkg
# (packaging/version.sh). Install it with
# apt-get install ./dist/consul-xds-bridge_*.deb.
package: package-bin $(NFPM)
	NFPM=$(NFPM) ./packaging/build-deb.sh $(PKGBIN) $(PKGVERSION) $(CURDIR)/dist

# The binary as the package ships it: PIE (with RELRO), stripped,
# reproducible paths, no cgo.
package-bin:
	CGO_ENABLED=0 $(GO) build -buildmode=pie -trimpath \
		-ldflags "-s -w -X main.version=$(PKGVERSION) -X main.commit=$(COMMIT)" -o $(PKGBIN) ./cmd/consul-xds-bridge

clean:
	rm -rf bin dist

# Fleet-scale load harness (bench/, cmd/xds-load): simulated Envoys against
# the bridge, a baseline go-control-plane server and Consul's own xDS
# server, on a real Consul. Not part of `make test`. `bench` is the quick
# run (N = 100 and 1000, under ~10 minutes on 2 cores); `bench-full` goes
# to 5000 proxies. Extra flags: make bench BENCHFLAGS='-n 100 -compare ""'.
XDSLOAD := $(CURDIR)/bin/xds-load
BENCHFLAGS ?=

.PHONY: bench bench-full bench-tools

bench-tools: build consul
	$(GO) build -o $(XDSLOAD) ./cmd/xds-load

bench: bench-tools
	$(XDSLOAD) run -consul $(CONSUL) -bridge $(BIN) $(BENCHFLAGS)

bench-full: bench-tools
	$(XDSLOAD) run -full -consul $(CONSUL) -bridge $(BIN) $(BENCHFLAGS)
