# flyball — build, test and lint entry points for the Go workspace.
#
# Targets documented with `## ` on the target line show up in `make help`.
# Every multi-module target loops over the modules listed in go.work and stops
# at the first failing module.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
.DELETE_ON_ERROR:
MAKEFLAGS += --no-builtin-rules --warn-undefined-variables

# ---------------------------------------------------------------------------
# Configuration (override on the command line: make test TEST_TIMEOUT=20m)
# ---------------------------------------------------------------------------
GO               ?= go
GOFMT            ?= gofmt
VERSION          ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
TEST_TIMEOUT     ?= 10m
FUZZTIME         ?= 10s
# Extra flags for `make bench`, e.g. BENCH_ARGS='-benchtime=2s -count=5'.
BENCH_ARGS       ?=
# Extra arguments for `make run` (passed to `flyball dev`).
ARGS             ?=
GOLANGCI_VERSION := v2.15.0

BIN           := $(CURDIR)/bin
GOLANGCI_LINT := $(BIN)/golangci-lint

# Absolute directories of the workspace modules (from go.work).
MODULES := $(shell $(GO) list -m -f '{{.Dir}}' 2>/dev/null)

# Expand at the top of a recipe: aborts if `go list -m` produced nothing, so a
# broken go.work can never turn a module loop into a silent no-op.
require-modules = $(if $(strip $(MODULES)),,$(error could not list workspace modules; run '$(GO) list -m' to see why))

# Module directory relative to the repo root, for log lines ($$mod in shell).
modname = $${mod\#$(CURDIR)/}

# ---------------------------------------------------------------------------
# Help
# ---------------------------------------------------------------------------
.PHONY: help
help: ## Show this help
	@awk 'BEGIN { FS = ":.*?## " } \
	  /^[a-zA-Z0-9_.-]+:.*?## / { names[++n] = $$1; descs[n] = $$2; if (length($$1) > w) w = length($$1) } \
	  END { \
	    print "Usage: make <target> [VAR=value ...]"; print ""; print "Targets:"; \
	    for (i = 1; i <= n; i++) printf "  %-" w "s  %s\n", names[i], descs[i]; \
	  }' $(MAKEFILE_LIST)
	@echo
	@echo "Variables: VERSION=$(VERSION) TEST_TIMEOUT=$(TEST_TIMEOUT) FUZZTIME=$(FUZZTIME)"
	@echo "           GOLANGCI_VERSION=$(GOLANGCI_VERSION) BENCH_ARGS='$(BENCH_ARGS)' ARGS='$(ARGS)'"

# ---------------------------------------------------------------------------
# Build / run
# ---------------------------------------------------------------------------
.PHONY: build
build: ## Build bin/flyball (static, version from git describe)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w -X main.version=$(VERSION)" -o bin/flyball ./services/cmd/flyball

.PHONY: build-nats
build-nats: ## Build bin/nats-server at the version pinned in services/go.mod
	cd services && CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/nats-server github.com/nats-io/nats-server/v2
	$(BIN)/nats-server --version

.PHONY: run
run: build ## Build and run `flyball dev` (embedded NATS + every service); pass ARGS=...
	bin/flyball dev $(ARGS)

# ---------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------
.PHONY: test
test: ## Run all tests with -race -shuffle=on in every module (TEST_TIMEOUT=10m)
	$(require-modules)
	@for mod in $(MODULES); do \
	  echo "==> test $(modname)"; \
	  (cd "$$mod" && $(GO) test -race -shuffle=on -timeout $(TEST_TIMEOUT) -count=1 ./...) || exit 1; \
	done

.PHONY: fuzz
fuzz: ## Run every Fuzz target in every module for FUZZTIME each (default 10s)
	$(require-modules)
	@for mod in $(MODULES); do \
	  echo "==> fuzz $(modname)"; \
	  cd "$$mod"; \
	  pkgs=$$($(GO) list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}}{{end}}' ./...); \
	  for pkg in $$pkgs; do \
	    list=$$($(GO) test -list '^Fuzz' "$$pkg") || { echo "$$list"; exit 1; }; \
	    for name in $$(grep -E '^Fuzz[[:alnum:]_]*$$' <<<"$$list" || true); do \
	      echo "--> $$pkg $$name ($(FUZZTIME))"; \
	      $(GO) test -run='^$$' -fuzz="^$$name\$$" -fuzztime=$(FUZZTIME) "$$pkg" || exit 1; \
	    done; \
	  done; \
	done

.PHONY: bench
bench: ## Run all benchmarks in every module (extra flags via BENCH_ARGS)
	$(require-modules)
	@for mod in $(MODULES); do \
	  echo "==> bench $(modname)"; \
	  (cd "$$mod" && $(GO) test -run='^$$' -bench=. -benchmem $(BENCH_ARGS) ./...) || exit 1; \
	done

.PHONY: bench-smoke
bench-smoke: ## Run pkg benchmarks 100x each (quick CI smoke check)
	@echo "==> bench-smoke pkg"
	@out=$$(mktemp); trap 'rm -f "$$out"' EXIT; \
	(cd pkg && $(GO) test -run='^$$' -bench=. -benchtime=100x -benchmem ./...) 2>&1 | tee "$$out"; \
	if ! grep -q '^Benchmark' "$$out"; then echo "warning: bench-smoke ran no benchmarks (pkg has no Benchmark functions yet)"; fi

# ---------------------------------------------------------------------------
# Lint / verify
# ---------------------------------------------------------------------------
# Installs golangci-lint into ./bin unless the right version is already there.
.PHONY: lint-install
lint-install: ## Install golangci-lint (GOLANGCI_VERSION) into bin/ if missing or outdated
	@have=$$($(GOLANGCI_LINT) version --short 2>/dev/null || true); \
	if [[ "$$have" != "$(GOLANGCI_VERSION:v%=%)" ]]; then \
	  echo "==> installing golangci-lint $(GOLANGCI_VERSION) into bin/ (have: $${have:-none})"; \
	  GOBIN=$(BIN) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_VERSION); \
	fi
	@$(GOLANGCI_LINT) version

.PHONY: lint
lint: lint-install ## Run golangci-lint (.golangci.yml) in every module
	$(require-modules)
	@$(GOLANGCI_LINT) config verify
	@for mod in $(MODULES); do \
	  echo "==> lint $(modname)"; \
	  (cd "$$mod" && $(GOLANGCI_LINT) run ./...) || exit 1; \
	done

.PHONY: verify
verify: ## Fail on untidy go.mod/go.sum, gofmt issues or go vet findings (all modules)
	$(require-modules)
	@failed=(); \
	for mod in $(MODULES); do \
	  name=$(modname); \
	  echo "==> verify $$name: go mod tidy"; \
	  if ! (cd "$$mod" && GOWORK=off $(GO) mod tidy -diff); then \
	    echo "!! $$name: go.mod/go.sum are not tidy (run: make tidy)"; failed+=("$$name:tidy"); \
	  fi; \
	  echo "==> verify $$name: gofmt"; \
	  if ! unformatted=$$(cd "$$mod" && find . -name '*.go' -not -path '*/testdata/*' -print0 | xargs -0 -r $(GOFMT) -l); then \
	    echo "!! $$name: gofmt failed (syntax error?)"; failed+=("$$name:gofmt"); \
	  elif [[ -n "$$unformatted" ]]; then \
	    echo "!! $$name: files need gofmt:"; sed 's/^/     /' <<<"$$unformatted"; failed+=("$$name:gofmt"); \
	  fi; \
	  echo "==> verify $$name: go vet"; \
	  if ! (cd "$$mod" && $(GO) vet ./...); then \
	    echo "!! $$name: go vet failed"; failed+=("$$name:vet"); \
	  fi; \
	done; \
	if (( $${#failed[@]} )); then echo "verify FAILED: $${failed[*]}"; exit 1; fi; \
	echo "verify OK"

.PHONY: tidy
tidy: ## Run go mod tidy in every module (GOWORK=off, uses the replace directives)
	$(require-modules)
	@for mod in $(MODULES); do \
	  echo "==> tidy $(modname)"; \
	  (cd "$$mod" && GOWORK=off $(GO) mod tidy) || exit 1; \
	done

# ---------------------------------------------------------------------------
# Housekeeping
# ---------------------------------------------------------------------------
.PHONY: clean
clean: ## Remove build outputs and local dev state (bin/, .flyball/)
	rm -rf bin .flyball
