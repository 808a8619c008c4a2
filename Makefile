# surveysync — developer entry points. `make help` lists them.
GO       ?= go
BIN      ?= bin
PKGS     ?= ./...
BENCHTIME ?= 1x

.PHONY: help build test test-cluster race test-short lint demo bench clean

help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

build: ## build bin/surveysync and bin/surveysim
	$(GO) build -o $(BIN)/surveysync ./cmd/surveysync
	$(GO) build -o $(BIN)/surveysim ./cmd/surveysim

test: ## the test suite, race detector on (integration tests run when SURVEYSYNC_TEST_CLICKHOUSE_ADDR is set), then test-cluster when a test cluster is up
	$(GO) test -race -count=1 -timeout 30m $(PKGS)
	@if [ -n "$$SURVEYSYNC_TEST_CLICKHOUSE_CLUSTER_ADDR" ]; then $(MAKE) --no-print-directory test-cluster; \
	else echo "test-cluster skipped: SURVEYSYNC_TEST_CLICKHOUSE_CLUSTER_ADDR is not set (make cluster-up)"; fi

# Every test that uses the test cluster runs here, under scripts/test-cluster.sh's
# guard against ClickHouse 18.16's DDLWorker race, none in the first pass:
# first the cluster tests (TestCluster…: chaos, failover, copy-from) of the
# packages that have them, then the ClickHouse integration tests of the
# warehouse, the file index and the feed ledger once more, every Sink they
# open in cluster mode (replicated, ON CLUSTER). No race detector: the code
# under test is the one the first pass raced; this pass is about ClickHouse.
CLUSTER_ONLY_PKGS ?= ./internal/testkit/chcluster/ ./sink/clickhouse/ ./cmd/surveysync/
CLUSTER_TEST_PKGS ?= ./sink/clickhouse/ ./source/feed/

test-cluster: ## the tests that use the test cluster (make cluster-up, then export its variables)
	GO=$(GO) scripts/test-cluster.sh -run '^TestCluster' $(CLUSTER_ONLY_PKGS)
	GO=$(GO) scripts/test-cluster.sh -on-cluster $(CLUSTER_TEST_PKGS)

race: test ## alias of test

test-short: ## unit tests only, no race detector
	$(GO) test -short -count=1 $(PKGS)

GOLANGCI_VERSION ?= v2.15.0
GOLANGCI ?= $(shell $(GO) env GOPATH)/bin/golangci-lint

lint: ## gofmt, go vet and golangci-lint (.golangci.yml; installed from the Go module proxy on first use)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	@if ! $(GOLANGCI) version 2>/dev/null | grep -q "$(GOLANGCI_VERSION:v%=%)"; then \
		echo "go install golangci-lint $(GOLANGCI_VERSION)"; \
		$(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_VERSION); fi
	$(GOLANGCI) run ./...

demo: ## sync the built-in emulator's responses into Parquet under ./data, then exit
	$(GO) run ./cmd/surveysync run --exit-when-synced

bench: ## the benchmarks of docs/benchmarks.md
	$(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) -benchmem ./bench/... ./pipeline/... ./source/... ./sink/... ./webhookrx/...

clean: ## remove build output and demo data
	rm -rf $(BIN) ./data

-include mk/*.mk
