# gpumesh — build, test, run a local testnet, benchmark.
#   make testnet   start a 5-node local network and run the demo (as root with ip and nft: with services; JOB_NETWORK=0 leaves them out)
#   make testnet-netns  the same with 12 nodes in network namespaces behind NATs (root)
#   make test      vet and run every test, then list the skipped ones with their reasons
#   make explorer  rebuild the Explorer web page (npm) into node/explorer/dist
#   make sim       the market simulation, 100 and 1000 nodes, into bench/SIM.md
#   make chaos     20 nodes through a flood, kills and skewed clocks, into bench/CHAOS.md
#   make gpu-check the CUDA prover on this machine's NVIDIA GPU (at most 7 min), into bench/GPU.md
#   make settle    bin/gpumesh-settle, the chain module's binary that sends settlement transactions (gpumesh settle deposit|redeem|close|withdraw|run)
#   make package   the .deb and .rpm (systemd unit, config, man pages, completions) into dist/
#   make package-test  build them, install the .deb in an overlay, verify the unit, boot it (root)
SHELL := /bin/bash
GO    ?= go
# go-nvml's cgo bindings warn about NVML functions NVIDIA deprecated.
export CGO_CFLAGS ?= -Wno-deprecated-declarations
export CGO_ENABLED := 1

BIN      := bin/gpumesh
TESTNET  := bin/testnet
NODES    ?= 5
FUZZTIME ?= 10s

.PHONY: all build settle test vet fuzz testnet testnet-netns testnet-down testnet-status bench sim chaos gpu-check clean explorer package package-test

all: build

build:
	$(GO) build -o $(BIN) ./cmd/gpumesh
	$(GO) build -o $(TESTNET) ./testnet/cmd/testnet

# The chain module's binary (go-ethereum), beside bin/gpumesh, where
# `gpumesh settle` finds it.
settle:
	cd chain && $(GO) build -o ../bin/gpumesh-settle ./cmd/gpumesh-settle

vet:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	  if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	$(GO) vet ./...

# Every test, through testsummary: the output of failed tests, a line
# per package, then every skipped test with its reason. A test skipping
# for a capability GPUMESH_REQUIRE lists (.ci/run sets it; see
# internal/testenv) fails instead.
test: vet
	$(GO) build -o bin/testsummary ./internal/cmd/testsummary
	@echo "GPUMESH_REQUIRE=$${GPUMESH_REQUIRE:-} (capabilities whose tests fail rather than skip)"
	set -o pipefail; $(GO) test -json -count=1 -timeout 25m ./... | bin/testsummary
	@# The chain module (chain/, go-ethereum; a module of its own, which ./... does not enter).
	cd chain && $(GO) vet ./...
	set -o pipefail; cd chain && $(GO) test -json -count=1 -timeout 15m ./... | ../bin/testsummary

# Rebuild the Explorer's page (node/explorer/dist, committed and embedded,
# so `go build` needs no npm) from its sources in node/explorer/web.
explorer:
	cd node/explorer/web && npm ci && npm run build

# Run every fuzz target for FUZZTIME each (their seed corpora also run in `make test`).
fuzz:
	@for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz'); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 200x $$pkg || exit 1; \
	  done; \
	done

testnet: build
	$(TESTNET) up $(NODES) --bin $(BIN) $(if $(JOB_NETWORK),--job-network=$(JOB_NETWORK))
	$(TESTNET) demo --bin $(BIN)

# 12 nodes in a namespace lab: a third public, a third behind cone NATs, a
# third behind symmetric NATs, with WAN latency (Linux, root, iproute2,
# nftables; see docs/testnet.md). `make testnet-down` removes it.
testnet-netns: build
	$(TESTNET) up --netns --bin $(BIN)
	$(TESTNET) demo --bin $(BIN)

testnet-down:
	$(TESTNET) down

testnet-status:
	$(TESTNET) status

# Micro-benchmarks beside their baselines, then the harness that writes
# bench/RESULTS.md (per-message costs against raw ed25519 and raw Badger;
# the challenge's false alarms and catch rates, TRIALS challenges per
# case, verify/audit's TestDetectionRates; on a 20-node testnet: cold
# search, cold CLI rent, rent to lease, ask propagation, lease to running
# job, idle RSS and CPU; search, lease and ask propagation again at 50
# and 100 nodes), then the same across NATs
# with WAN latency in the namespace testnet, each as a multiple of the
# peers' round trip, and the time from a supplier's start to the first
# job on it across two NATs in a network with one public node (root;
# skipped, saying why, without network namespaces).
TRIALS ?= 20
bench: build
	$(GO) test -run '^$$' -bench . -benchmem ./p2p/ ./store/ ./market/
	$(GO) test -run '^$$' -bench . -benchmem -benchtime 200x ./market/settle/
	$(GO) test -run '^$$' -bench ChallengeSim -benchtime 3x ./verify/audit/
	$(GO) run ./testnet/cmd/bench --bin $(BIN) -trials $(TRIALS)
	$(GO) test -run '^$$' -bench NAT -benchtime 3x -timeout 15m -v ./testnet/
	$(GO) test -run '^$$' -bench SmallNetwork -benchtime 1x -timeout 15m -v ./testnet/

# The market simulation: the real market code on an in-memory network,
# 100 nodes (SIM_SEEDS seeds) and then SIM_NODES (1000), beside an
# optimal central matcher, under contention: offered load SIM_LOAD of the
# honest GPUs, SIM_WARM of them leased before the first slot (a warm
# start, testnet/sim/doc.go);
# the figures go to bench/SIM.md. The large run is CPU-bound on a small
# machine (every node checks every order): expect tens of minutes. Then,
# pass or fail, its figures are carried into bench/RESULTS.md.
SIM_NODES ?= 1000
SIM_LOAD  ?= 1.2
SIM_WARM  ?= 0.9
SIM_SEEDS ?= 3
sim:
	SIM_NODES=$(SIM_NODES) SIM_LOAD=$(SIM_LOAD) SIM_WARM=$(SIM_WARM) SIM_SEEDS=$(SIM_SEEDS) SIM_REPORT=bench/SIM.md $(GO) test ./testnet/sim -run 'TestMarket$$' -v -count=1 -timeout 3h; \
	status=$$?; $(GO) run ./testnet/cmd/bench -carry-only && exit $$status

# The chaos run (package testnet/chaos): 20 node processes, two with clocks
# 30 s off, through a calm minute, a minute of a flood of valid-signed asks
# and two minutes of random SIGKILLs and restarts, under rents and jobs;
# then every node's store is checked. Writes bench/CHAOS.md, whose verdict
# is then carried into bench/RESULTS.md; fails when a check does not hold.
chaos: build
	$(GO) run ./testnet/cmd/chaos --bin $(BIN) --out bench/CHAOS.md; \
	status=$$?; $(GO) run ./testnet/cmd/bench -carry-only && exit $$status

# The CUDA prover (verify/cuda) on this machine's NVIDIA GPU, in at most 7
# minutes: `gpumesh gpus` through NVML, self-tests of both chain kernels
# and of the memory fold against the CPU reference, a full-size challenge
# timed by phase (verifier's cost, efficiency η) and a full-size memory
# proof; one JSON line per result, written to bench/GPU.md. Without an
# NVIDIA GPU and driver it stops at once saying so, and fails.
gpu-check: build
	bash scripts/gpu-check.sh

# The .deb and .rpm of bin/gpumesh (packaging/, docs/operators.md),
# built by tools/pkg: a module of its own, so that nfpm's dependencies
# stay out of go.mod. SOURCE_DATE_EPOCH, when set, is the files' mtime.
package: build
	cd tools/pkg && $(GO) run . -bin ../../$(BIN) -src ../../packaging -out ../../dist

# The packaging tests alone (they run in `make test` too): build the
# packages, install the .deb into an overlay of this machine's root in a
# private mount namespace and check it (systemd-analyze verify and
# security), then, with systemd-nspawn and mmdebstrap, boot Debian with
# it and see gpumesh.service report ready and pass `gpumesh doctor`.
# Root; each part skips, saying why, without its tools.
# GPUMESH_ROOTFS_CACHE=DIR keeps the booted root between runs.
package-test:
	$(GO) test -count=1 -v -timeout 15m ./packaging/

clean:
	rm -rf bin dist
