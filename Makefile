# Everyday commands. `make test` is the one to run: it starts (or reuses) the
# servers the integration tests need (Redis, a Redis Cluster, five Redlock
# nodes, ZooKeeper, Consul, MySQL), exports their addresses and runs every
# test with the race detector.

SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := test

GO ?= go
SERVICES := scripts/services.sh

.PHONY: demo services status env test bench vet fmt fmt-check down

## demo: run the cerberusctl demo
demo:
	$(GO) run ./cmd/cerberusctl demo

## services: start (or reuse) Redis, ZooKeeper, Consul and MySQL on loopback
services:
	$(SERVICES) up

## status: say which servers answer
status:
	$(SERVICES) status

## env: print the CERBERUS_* exports; use as eval "$$(make -s env)"
env:
	@$(SERVICES) env

## test: servers up, then go test -race over the whole module
test: services
	eval "$$($(SERVICES) env)" && $(GO) test -race -count=1 ./...

## bench: side-by-side figures against the peer libraries (bench/ is its own
## module); writes bench/results.txt (BENCH lines) and bench/chart.svg
bench: services
	eval "$$($(SERVICES) env)" && cd bench && \
	  $(GO) test -run '^$$' -bench '$(or $(BENCH),.)' -benchtime=1x -timeout 60m . | tee results.txt && \
	  $(GO) run ./cmd/benchchart < results.txt > chart.svg

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
