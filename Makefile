# Everyday commands. `make test` is the one to run: it starts (or reuses) the
# servers the integration tests need (Redis, a Redis Cluster, five Redlock
# nodes, ZooKeeper, Consul, MySQL, etcd, PostgreSQL), exports their addresses and runs every
# test with the race detector.

SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := test

GO ?= go
SERVICES := scripts/services.sh

.PHONY: demo services status env test test-short bench fuzz soak vet fmt fmt-check down

## demo: run the cerberusctl demo
demo:
	$(GO) run ./cmd/cerberusctl demo

## services: start (or reuse) Redis, ZooKeeper, Consul, MySQL, etcd and
## PostgreSQL on loopback
services:
	$(SERVICES) up

## status: say which servers answer
status:
	$(SERVICES) status

## env: print the CERBERUS_* exports; use as eval "$$(make -s env)"
env:
	@$(SERVICES) env

## test: servers up, then go test -race over the whole module; integration/
## (about 17 minutes) is named first so that it starts first, beside the
## other packages, instead of after them
test: services
	eval "$$($(SERVICES) env)" && $(GO) test -race -count=1 -timeout 45m ./integration/ ./...

## test-short: a quick run that needs no server: go test -short skips every
## test that needs one
test-short:
	$(GO) test -short ./...

## bench: side-by-side figures against the peer libraries (bench/ is its own
## module); writes bench/results.txt (BENCH lines) and bench/chart.svg
bench: services
	eval "$$($(SERVICES) env)" && cd bench && \
	  $(GO) test -run '^$$' -bench '$(or $(BENCH),.)' -benchtime=1x -timeout 60m . | tee results.txt && \
	  $(GO) run ./cmd/benchchart < results.txt > chart.svg

## fuzz: run every fuzz target (each func FuzzX in a _test.go file) for
## $(FUZZTIME) (default 30s), one after the other, as go test allows one
## -fuzz target per run; a failing input is saved under the package's
## testdata/fuzz/, where plain go test replays it
fuzz:
	@grep -rHo --include='*_test.go' '^func Fuzz[A-Za-z0-9_]*' . | grep -v '^\./bench/' | sort | \
	while IFS=: read -r file fn; do \
	  name=$${fn#func }; pkg=./$$(dirname "$${file#./}"); \
	  echo "== $$pkg $$name ($(or $(FUZZTIME),30s))"; \
	  $(GO) test -run '^$$' -fuzz "^$$name$$" -fuzztime '$(or $(FUZZTIME),30s)' "$$pkg" </dev/null || exit 1; \
	done

## soak: the reliability checker on every engine, repeated with its faults
## for $(SOAK) (default 10m) in all, then every engine holding 100,000
## renewed leases for a minute; prints one CHECK line per checker run, a
## total per engine, and one SCALE line per engine
soak: services
	eval "$$($(SERVICES) env)" && CERBERUS_SOAK='$(or $(SOAK),10m)' CERBERUS_SCALE=100000 \
	  $(GO) test -count=1 -run '^(TestChecker|TestScale)' -timeout 3h -v ./integration/ | grep -E '^(CHECK|SCALE|--- |FAIL|ok|PASS)'

## vet: go vet the module
vet:
	$(GO) vet ./...

## fmt: gofmt -s every Go file in place
fmt:
	gofmt -s -w $$(find . -name '*.go' -not -path './.git/*')

## fmt-check: fail if a Go file is not gofmt -s clean
fmt-check:
	@out=$$(gofmt -s -l $$(find . -name '*.go' -not -path './.git/*')); \
	if [ -n "$$out" ]; then echo "not gofmt -s clean:"; echo "$$out"; exit 1; fi

## down: stop the servers that scripts/services.sh started (and only those)
down:
	$(SERVICES) down
