# mcpvisor — `make test` installs what the tests need (into .deps/, git-ignored)
# and runs every test. CI runs exactly this (.ci/run).

GO ?= go
SHELL := bash

.PHONY: test test-deps deploy-check hydra helm images release-snapshot bench-team bench-flood bench-replicas vet vet-go lint vet-tools build compat bench bench-gateway bench-relay-split bench-instructions bench-dormant bench-fleet bench-connect bench-sessions bench-startup

# The linters (lint: staticcheck and deadcode, a minute of CPU on a fresh
# machine) run beside the tests, at the lowest priority (nice 19, so that
# they take only what the tests leave idle: a timing test such as
# TestCPULimit needs a core of its own for a while): the race-enabled
# tests leave about half of the CPU idle while they wait on processes and
# timers. Their output follows the tests', and either failing fails make
# test. (The trap gives them back the interrupt that a shell without job
# control takes from what it starts in the background: ^C ends them too.)
# The Linux passes say GOOS=linux, so that they are the Linux passes on a
# Mac as well.
#
# The deployment checks (deploy-check: the Helm chart linted and rendered,
# the images built with podman and read) run in that background job too,
# after the linters: they wait for Helm, which test-deps builds in the
# background, and a test binary waiting in `go test ./...` would hold one
# of its two slots on a 2-core machine meanwhile.
test: test-deps vet-go vet-tools
	@{ trap - INT QUIT; exec nice -n 19 $(MAKE) -k --no-print-directory lint deploy-check >.deps/lint.log 2>&1; } & lint=$$!; \
	status=0; \
	{ echo "GOOS=darwin $(GO) build ./..." && GOOS=darwin $(GO) build ./... && \
	  echo "$(GO) test -race -count=1 ./...   (lint runs beside it)" && $(GO) test -race -count=1 ./... && \
	  $(GO) test -count=1 -run '^TestRelayCallAllocs$$' ./internal/gateway/; } || status=$$?; \
	lintstatus=0; wait $$lint || lintstatus=$$?; \
	echo "lint and deployment checks:"; cat .deps/lint.log; \
	if [ $$lintstatus -ne 0 ]; then echo "make test: lint or the deployment checks failed (exit $$lintstatus)"; fi; \
	[ $$status -eq 0 ] && [ $$lintstatus -eq 0 ]

test-deps:
	./scripts/test-deps.sh

# Ory Hydra, the OAuth authorization server of the tests of mcpvisor as a
# resource server (internal/testserver/hydra), into .deps/tools/hydra:
# built from its own module, tools/hydra/go.mod, and only when that or the
# flags change (tools/hydra/build.sh). On a fresh machine it is a minute
# and a half of CPU, so make test does not wait for it: test-deps starts
# it in the background at nice 19, beside vet, the macOS build and the
# tests, and the Hydra tests wait for the binary (at most 4 minutes).
hydra:
	GO=$(GO) tools/hydra/build.sh

# Helm v4 and chartcheck (the Helm chart's tests, deploy/), into
# .deps/tools/helm and .deps/tools/chartcheck: built from their own
# module, tools/helm/go.mod, only when that or the flags change
# (tools/helm/build.sh). From an empty cache it is three minutes of CPU
# (112 s on this 2-core machine), so like Hydra's, make test starts the
# build in the background (test-deps) and the chart's tests wait for it
# (at most 6 minutes).
helm:
	GO=$(GO) tools/helm/build.sh

# The images, with podman (deploy/docker/build.sh): mcpvisor:dev (FROM
# scratch: mcpvisor, its shim, CA certificates, user 65532) and
# mcpvisor:dev-node (the same with Node 22, npm and npx), TAG=... for
# another tag. Their build context is prepared in .deps/docker
# (deploy/docker/context.sh: the static binaries, Debian's packages,
# npm's node); the images go to podman's storage in .deps/containers,
# never the user's: deploy/docker/podman.sh images lists them, and
# deploy/docker/podman.sh push pushes one.
TAG ?= dev
images:
	GO=$(GO) TAG=$(TAG) deploy/docker/build.sh

# A release built locally as the release pipeline would build it, with
# GoReleaser (.goreleaser.yaml): mcpvisor and mcpvisor-shim for Linux and
# macOS on amd64 and arm64, archives and their SHA-256 checksums, in
# dist/. GoReleaser is built from its own module (tools/goreleaser/go.mod)
# into .deps/tools/goreleaser the first time (several minutes of CPU): not
# part of make test.
release-snapshot:
	cd tools/goreleaser && GOWORK=off GOOS=$$($(GO) env GOHOSTOS) GOARCH=$$($(GO) env GOHOSTARCH) \
	  $(GO) build -o ../../.deps/tools/goreleaser github.com/goreleaser/goreleaser/v2
	MCPVISOR_REVISION=$$(git rev-parse --short HEAD) .deps/tools/goreleaser release --snapshot --clean

# vet: vet-go (gofmt and go vet) and lint (staticcheck, its default
# checks, and deadcode, scripts/deadcode.sh), for Linux and macOS.
# staticcheck and deadcode are built from the tools module (tools/go.mod,
# versions pinned there, apart from mcpvisor's own dependencies) into
# .deps/tools. The macOS pass leaves out staticcheck's unused-code check:
# what only Linux uses (cgroups, the shim) is unused there by design, and
# deadcode judges unused code. It checks only the packages whose files
# differ on macOS (go vet checks them all): the others' findings are the
# Linux pass's, and on a fresh machine the pass over every package costs
# half a minute.
vet: vet-go lint

vet-go:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	GOOS=linux $(GO) vet ./...
	GOOS=linux $(GO) vet -tags deploycheck ./deploy/
	GOOS=darwin $(GO) vet ./...

GOFILES_FMT := {{.ImportPath}} {{.GoFiles}} {{.TestGoFiles}} {{.XTestGoFiles}}
lint: vet-tools
	GOOS=linux .deps/tools/staticcheck ./...
	@darwin=$$(diff <(GOOS=linux $(GO) list -f '$(GOFILES_FMT)' ./...) <(GOOS=darwin $(GO) list -f '$(GOFILES_FMT)' ./...) | sed -n 's/^> \([^ ]*\) .*/\1/p'); \
	if [ -z "$$darwin" ]; then echo "lint: no package differs on macOS (go list failed?)"; exit 1; fi; \
	echo "GOOS=darwin .deps/tools/staticcheck -checks inherit,-U1000" $$darwin; \
	GOOS=darwin .deps/tools/staticcheck -checks inherit,-U1000 $$darwin
	GOOS=linux DEADCODE=.deps/tools/deadcode ./scripts/deadcode.sh
	GOOS=linux .deps/tools/staticcheck -tags deploycheck ./deploy/

# The deployment artifacts' tests (deploy/, build tag deploycheck): the
# chart linted and rendered by Helm (waited for), each manifest checked,
# and on Linux the images built with podman and read without running.
deploy-check:
	$(GO) test -count=1 -tags deploycheck ./deploy/

# The tools run here: built for this machine whatever GOOS says.
vet-tools:
	GOOS=$$($(GO) env GOHOSTOS) GOARCH=$$($(GO) env GOHOSTARCH) $(GO) build -modfile=tools/go.mod -o .deps/tools/ honnef.co/go/tools/cmd/staticcheck golang.org/x/tools/cmd/deadcode

# mcpvisor and, next to it, the pid-namespace init it finds there.
build:
	$(GO) build -o bin/ ./cmd/mcpvisor ./cmd/mcpvisor-shim

# The compatibility run of issue 39 (a few minutes; needs the npm registry
# the first time): eleven popular npm stdio servers, pinned, installed once
# into .deps/compat, each run directly and through mcpvisor serve — both
# endpoints, both eras, after a wake — and compared as JSON. The report
# goes to bin/compat/report.txt. Not part of make test.
compat:
	MCPVISOR_COMPAT=1 MCPVISOR_COMPAT_DIR=$(CURDIR)/.deps/compat MCPVISOR_COMPAT_OUT=$(CURDIR)/bin/compat/report.txt $(GO) test -count=1 -timeout 30m -run '^TestCompat$$' -v ./cmd/mcpvisor/

bench: test-deps
	$(GO) test -run '^$$' -bench . -benchtime 20x ./internal/proc/

# The gateway benchmark of issue 4 (about 4 minutes, 6 with BASE): direct
# stdio, the HTTP floor, a raw relay, /servers/x/mcp, /mcp (tracing off and
# on) and mcpvisor stdio under 16 callers in 3 interleaved rounds, RSS and
# CPU profiles; then issue 30's verdict: 20 rounds of short windows of the
# raw relay and serve's endpoints only, and each endpoint's CPU per call
# over the raw relay's, the geometric mean of the rounds' ratios with its
# 95 % confidence interval (the resolution). Tracing off, an endpoint above the
# raw relay's + the resolution fails the run (NOGATE=1: reported only);
# tracing on is reported, not judged. The report and the profiles go to
# bin/bench/. BASE=REV (a git revision) adds a baseline: mcpvisor serve
# built from REV, its /servers/x/mcp and /mcp in the same rounds, and now /
# @base ratios.
BASE ?= $(MCPVISOR_BENCH_BASE)
NOGATE ?= $(MCPVISOR_BENCH_NOGATE)
bench-gateway:
	MCPVISOR_BENCH=1 MCPVISOR_BENCH_NOGATE=$(NOGATE) MCPVISOR_BENCH_BASE=$(BASE) MCPVISOR_BENCH_OUT=$(CURDIR)/bin/bench $(GO) test -count=1 -timeout 15m -run '^TestBenchReport$$' -v ./cmd/mcpvisor/

# Where serve's CPU per call beyond the raw relay's goes (issue 30; about
# 2 minutes): the raw relay alone, and the raw relay inside serve's own
# process beside /servers/x/mcp and /mcp, 16 callers, 24 interleaved
# rounds; the process's share (the same relay in serve's process over the
# relay alone) and the per-call work's (each endpoint over the relay in
# the same process), with 95 % intervals. Reported, not judged; the
# report goes to bin/bench/split-report.txt.
bench-relay-split:
	MCPVISOR_BENCH_SPLIT=1 MCPVISOR_BENCH_OUT=$(CURDIR)/bin/bench $(GO) test -count=1 -timeout 15m -run '^TestBenchRelaySplit$$' -v ./cmd/mcpvisor/

# Instructions per call (issue 30; about 7 minutes, 10 with BASE): what
# bench-gateway's rounds cannot resolve, counted by valgrind's cachegrind
# in the serving process alone — the raw relay (session-era and 2026-07-28
# requests), serve's /servers/x/mcp, /mcp and /mcp stateless — as
# (Ir(3N) − Ir(N)) / 2N over two runs with N=1000 and 3N calls of the same
# load client, the median of 3 interleaved repeats with their spread, and
# ratios to the raw relay. With them, the first-level cache misses of a
# call in cachegrind's model of this machine's caches (code: I1; data:
# D1), and where a call's instructions and misses go by package, each
# serve path next to the raw relay: a call can run fewer instructions and
# still cost more time if its code and data span more cache lines.
# BASE=REV adds serve built from REV and now / @base ratios.
# Needs valgrind; the report goes to bin/bench/instructions-report.txt.
bench-instructions:
	MCPVISOR_BENCH_INSTR=1 MCPVISOR_BENCH_BASE=$(BASE) MCPVISOR_BENCH_OUT=$(CURDIR)/bin/bench $(GO) test -count=1 -timeout 30m -run '^TestBenchInstructions$$' -v ./cmd/mcpvisor/

# What a learned, dormant server costs (about 6 minutes): mcpvisor serve's
# RSS (and its anonymous part, and the live heap) with 1,000 servers of 20
# tools, all learned and dormant, minus with one, in the run that learned
# them and after a restart that reads them from the state file; three
# interleaved rounds, judged on the median. The first round also reports,
# unjudged, what each server from 500 to 1,000 adds. N=... changes the
# number of servers; IDLE=1 also waits, in the first round, until the
# aggregated lists a client listed went unused for the gateway's TableIdle
# (5 minutes more), and reports the memory then.
N ?= 1000
IDLE ?=
bench-dormant:
	MCPVISOR_BENCH=1 MCPVISOR_DORMANT_N=$(N) MCPVISOR_DORMANT_IDLE=$(IDLE) $(GO) test -count=1 -timeout 25m -run '^TestDormantServerRSS$$' -v ./cmd/mcpvisor/

# The fleet benchmark of issue 14 (about 3 minutes): npm's server-everything
# and server-memory configured as `npx -y @modelcontextprotocol/server-NAME`,
# from npm's npx cache (.deps/npm-cache) and from a local project
# (.deps/npm), each run flattened and "launch": "as-written" by one
# mcpvisor serve; wake time (dormant → first answer to a tools/call) and
# the RSS of the running tree, in interleaved rounds, as ratios. The report
# goes to bin/bench/fleet-report-nodeMAJOR.txt. NODE=22, NODE=24 or NODE=26 runs it
# with that Node release line first on PATH (npm, npx and the servers run on
# it) instead of the machine's node: scripts/bench-node.sh installs it into
# .deps/nodeMAJOR on first use. NODE22=1 is NODE=22. PNPM=1 adds the same
# servers as `pnpm dlx`, with pnpm 10 and pnpm 12.
NODE ?= $(if $(NODE22),22)
bench-fleet: test-deps
	@nodebin=""; if [ -n "$(NODE)" ]; then nodebin=$$(scripts/bench-node.sh $(NODE)) || exit 1; nodebin="$$nodebin:"; fi; \
	PATH="$$nodebin$$PATH" MCPVISOR_BENCH_FLEET=1 MCPVISOR_BENCH_PNPM=$(PNPM) MCPVISOR_BENCH_OUT=$(CURDIR)/bin/bench $(GO) test -count=1 -timeout 20m -run '^TestBenchFleet$$' -v ./cmd/mcpvisor/

# What mcpvisor connect adds (about 40 s): per-call latency of one client
# through connect → serve, mcpvisor stdio and direct stdio to the fixture,
# in interleaved rounds, with connect − stdio differences; and the RSS of
# each. The report goes to bin/bench/connect-report.txt.
bench-connect:
	MCPVISOR_BENCH_CONNECT=1 MCPVISOR_BENCH_OUT=$(CURDIR)/bin/bench $(GO) test -count=1 -timeout 10m -run '^TestBenchConnect$$' -v ./cmd/mcpvisor/

# What an open client session costs mcpvisor serve in resident memory
# (about 3 minutes): 999 sessions opened after a warm one, in fresh
# processes of this tree and of BASE=REV (a git revision, required),
# interleaved rounds; the report goes to bin/bench/sessions-report.txt.
bench-sessions:
	MCPVISOR_BENCH_SESSIONS=1 MCPVISOR_BENCH_BASE=$(BASE) MCPVISOR_BENCH_OUT=$(CURDIR)/bin/bench $(GO) test -count=1 -timeout 10m -run '^TestBenchSessionRSS$$' -v ./cmd/mcpvisor/

# How long mcpvisor serve takes to serve, and what mcpvisor connect costs
# (about 2 minutes): a fresh serve timed until it reports its address, a
# fresh connect to it until its first tools/call is answered, and
# connect's RSS, in fresh processes of this tree and of BASE=REV (a git
# revision, required), 30 interleaved rounds; now/base ratios with their
# 95 % intervals. The report goes to bin/bench/startup-report.txt.
bench-startup:
	MCPVISOR_BENCH_STARTUP=1 MCPVISOR_BENCH_BASE=$(BASE) MCPVISOR_BENCH_OUT=$(CURDIR)/bin/bench $(GO) test -count=1 -timeout 10m -run '^TestBenchStartup$$' -v ./cmd/mcpvisor/

# What team identity (auth, a 20-rule policy, the audit) adds to a call,
# part by part, in thread CPU time against the same path without it, in
# interleaved rounds of one run (issue: at most 10 µs in all).
bench-team:
	go test -run XXX -bench BenchmarkTeamCost -benchtime=1x -count=5 ./internal/gateway/

# One identity floods serve (its own process) at 20 times its rate limit
# from another process while a third calls at a steady pace: the flood's
# 429s, and the steady caller's p50/p99 flooded against quiet, in
# interleaved phases of one run.
# The cost of replicas (issue 37; about 3 minutes): three mcpvisor serve
# on loopback behind haproxy; CPU per legacy call summed over the
# replicas, forwarded one hop against served where it landed, in 12
# interleaved rounds (the ratio with its 95 % interval), both latencies,
# and 2026-07-28 calls a second of one replica against three. The report
# goes to bin/bench/replicas-report.txt. GOVERNED=1 adds an audit and rate
# limits to the config: a forwarded call then also asks the replica it
# reached to admit it, and hands it its audit line.
bench-replicas:
	MCPVISOR_BENCH_REPLICAS=1 MCPVISOR_BENCH_GOVERNED=$(GOVERNED) MCPVISOR_BENCH_OUT=$(CURDIR)/bin/bench $(GO) test -count=1 -timeout 15m -run '^TestBenchReplicas$$' -v ./cmd/mcpvisor/

bench-flood:
	go test -run XXX -bench BenchmarkFloodIsolation -benchtime=1x -count=3 ./cmd/mcpvisor/
