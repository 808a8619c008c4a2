# surveysync — developer entry points. `make help` lists them.
GO       ?= go
BIN      ?= bin
PKGS     ?= ./...
BENCHTIME ?= 1x

.PHONY: help build test race test-short lint demo bench clean

help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

build: ## build bin/surveysync and bin/surveysim
	$(GO) build -o $(BIN)/surveysync ./cmd/surveysync
	$(GO) build -o $(BIN)/surveysim ./cmd/surveysim

test: ## the test suite, race detector on (integration tests run when SURVEYSYNC_TEST_CLICKHOUSE_ADDR is set)
	$(GO) test -race -count=1 -timeout 30m $(PKGS)

race: test ## alias of test

test-short: ## unit tests only, no race detector
	$(GO) test -short -count=1 $(PKGS)

lint: ## gofmt and go vet
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

demo: ## sync the built-in emulator's responses into Parquet under ./data, then exit
	$(GO) run ./cmd/surveysync run --exit-when-synced

bench: ## the benchmarks of docs/benchmarks.md
	$(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) -benchmem ./bench/... ./pipeline/... ./source/... ./sink/... ./webhookrx/...

clean: ## remove build output and demo data
	rm -rf $(BIN) ./data

-include mk/*.mk
