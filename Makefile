# freshread: see README.md. `make test` is what CI runs (.ci/run).
GO ?= go
export FRESHREAD_REQUIRE_INTEGRATION ?= 1

.PHONY: test vet fmt-check build-nocgo servers check-deps deps demo reshard-demo bench fleet soak api-check twin-sizes

## test: vet, gofmt, the CGO_ENABLED=0 build, and every test with -race,
## including the integration tests against real servers (a missing server
## fails; run `go test ./...` directly to skip them instead). The servers
## come from containers when a Docker engine answers, else from local
## binaries (FRESHREAD_DOCKER=1 / 0 forces one; scripts/servers).
test: servers vet fmt-check build-nocgo
	$(GO) test -race -count=1 -timeout 45m ./...

# The nested module internal/harness/containers (the container helper,
# testcontainers-go) is not part of ./... at the root: vetted on its own.
vet:
	$(GO) vet ./...
	cd internal/harness/containers && $(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

build-nocgo:
	CGO_ENABLED=0 $(GO) build ./...

## api-check: the exported API against the last release (RELEASES);
## fails on an incompatible change CHANGELOG.md does not list.
api-check:
	scripts/api-check

## twin-sizes: build a minimal PostgreSQL-only service with freshread and
## its twin with gorm.io/plugin/dbresolver (internal/harness/twins) and
## print their sizes, plain and stripped, and the modules each links
## (docs/measurements/footprint.md).
twin-sizes:
	GO=$(GO) scripts/twin-sizes

## servers: get the servers: the container image, or local binaries
## (installed when missing, as root with apt).
servers:
	@scripts/servers

## check-deps: name the local binaries that are missing; installs nothing.
check-deps:
	@scripts/install-deps --check

## deps: install PostgreSQL, MariaDB and Redis from Debian's packages (root).
deps:
	scripts/install-deps

## demo: start a replicated cluster, run the example service against it
## (freshness, then a trigger-written table with the tracker), then the
## sharded order service, then growing it online (reshard-demo).
# run_demo,cmd,name: runs example/cmd/<cmd>, saying how long it took (to a
# tenth of a second), and on failure which demo failed and what to try.
define run_demo
@t=$$(date +%s%N); took() { ms=$$(( ($$(date +%s%N) - t) / 1000000 )); echo "$$((ms / 1000)).$$((ms % 1000 / 100)) s"; }; \
	$(DEMO_BIN)/$(1) && echo "make demo: $(2) demo passed in $$(took)" || \
	{ echo "make demo: the $(2) demo failed after $$(took) (its output above says at which step); FRESHREAD_DOCKER=0 runs the servers as local processes, FRESHREAD_DOCKER=1 in containers" >&2; exit 1; }
endef

# The demos are compiled first, saying so (a minute on a cold Go cache).
DEMO_BIN ?= $(CURDIR)/.demo-bin

demo: servers
	@scripts/ticking "make demo: compiling the demos" $(GO) build -o $(DEMO_BIN)/ ./example/cmd/demo ./example/cmd/sharddemo ./example/cmd/resharddemo
	$(call run_demo,demo,freshness)
	$(call run_demo,sharddemo,sharding)
	$(call run_demo,resharddemo,resharding)

## reshard-demo: three worker processes write and read through a 4 -> 8
## doubling on PostgreSQL, the same on MariaDB, and a migration from one
## PostgreSQL database; checks every read and where every row ends up
## (docs/design/sharding-and-moves.md, "Growing the shards").
reshard-demo: servers
	$(GO) run ./example/cmd/resharddemo

## bench: Go benchmarks of the routing hot path and the classifier, then
## the mixed workload per routing strategy (docs/measurements/benchmarks.md).
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./plugin/ ./classify/ ./lsnstore/
	$(GO) run ./internal/harness/workload/cmd/bench -rate 400

## fleet: what 1, 10 and 100 processes using the plugin cost each database
## server and Redis, idle and at a fixed rate (docs/measurements/fleet.md).
fleet:
	$(GO) run ./internal/harness/workload/cmd/fleet -processes 1,10,100

## soak: the fault-injection soak with its independent checker, per engine
## and per store (one Redis; a Sentinel setup) for FRESHREAD_SOAK_DURATION
## (default 5m; make test runs 40s); FRESHREAD_SOAK_FAULTS=a,b restricts the
## faults; must report 0 stale reads (docs/design/reliability.md, docs/measurements/soak.md).
FRESHREAD_SOAK_DURATION ?= 5m
soak: servers
	FRESHREAD_SOAK_DURATION=$(FRESHREAD_SOAK_DURATION) $(GO) test -count=1 -timeout 0 -v -run 'TestSoak(Postgres|MariaDB)(Sentinel)?$$' ./internal/harness/soak/
