# Everyday commands. `make test` is the one to run: it starts (or reuses) the
# four servers the integration tests need, exports their addresses and runs
# every test with the race detector.

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

## bench: benchmarks of the bench/ module (its own go.mod), servers up
bench:
	@if [ ! -d bench ]; then \
	  echo "bench: no bench/ directory yet; nothing to run"; \
	else \
	  eval "$$($(SERVICES) up)" && cd bench && $(GO) test -run '^$$' -bench . -benchtime=1x -benchmem -timeout 60m ./...; \
	fi

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
