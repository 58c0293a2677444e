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
# The nats CLI that `make test` runs the docs' `nats pub` examples with.
NATSCLI_VERSION  := v0.5.0
# promtool, which `make test` checks and unit-tests the alert rules and the
# dashboard's queries with (github.com/prometheus/prometheus module version
# v0.316.0 is Prometheus 3.16; the compose stack runs Prometheus 3).
PROMTOOL_VERSION := v0.316.0

BIN           := $(CURDIR)/bin
GOLANGCI_LINT := $(BIN)/golangci-lint
NATS_CLI      := $(BIN)/nats
PROMTOOL      := $(BIN)/promtool

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
	@echo "           GOLANGCI_VERSION=$(GOLANGCI_VERSION) NATSCLI_VERSION=$(NATSCLI_VERSION) PROMTOOL_VERSION=$(PROMTOOL_VERSION)"
	@echo "           BENCH_ARGS='$(BENCH_ARGS)' ARGS='$(ARGS)'"

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
test: natscli-install promtool-install ## Run all tests with -race -shuffle=on in every module (TEST_TIMEOUT=10m)
	$(require-modules)
	@for mod in $(MODULES); do \
	  echo "==> test $(modname)"; \
	  (cd "$$mod" && FLYBALL_TEST_NATSCLI=$(NATS_CLI) FLYBALL_TEST_PROMTOOL=$(PROMTOOL) $(GO) test -race -shuffle=on -timeout $(TEST_TIMEOUT) -count=1 ./...) || exit 1; \
	done

.PHONY: natscli-install
natscli-install: ## Install the nats CLI (NATSCLI_VERSION) into bin/ if missing or outdated; the tests run the docs' nats pub examples with it
	@have=$$($(NATS_CLI) --version 2>/dev/null || true); \
	if [[ "$$have" != "$(NATSCLI_VERSION)" ]]; then \
	  echo "==> installing the nats CLI $(NATSCLI_VERSION) into bin/ (have: $${have:-none})"; \
	  GOBIN=$(BIN) CGO_ENABLED=0 $(GO) install github.com/nats-io/natscli/nats@$(NATSCLI_VERSION); \
	fi

# The version is read from the binary's build info: a go-installed promtool
# reports no version of its own. remove_all_sd leaves out the service
# discoveries promtool does not need here (AWS, Azure, GCE, ...), which
# are most of its build time.
.PHONY: promtool-install
promtool-install: ## Install promtool (PROMTOOL_VERSION) into bin/ if missing or outdated; the tests check and unit-test the alert rules with it
	@have=$$($(GO) version -m $(PROMTOOL) 2>/dev/null | awk '$$1 == "mod" { print $$3 }' || true); \
	if [[ "$$have" != "$(PROMTOOL_VERSION)" ]]; then \
	  echo "==> installing promtool $(PROMTOOL_VERSION) into bin/ (have: $${have:-none}; the first build takes a few minutes)"; \
	  GOBIN=$(BIN) CGO_ENABLED=0 $(GO) install -tags remove_all_sd github.com/prometheus/prometheus/cmd/promtool@$(PROMTOOL_VERSION); \
	fi

.PHONY: test-alerts
test-alerts: promtool-install ## Check alerts.yml and the dashboard's queries with promtool, run the alert unit tests (alerts_test.yml) and the alerts on real stacks
	cd services && FLYBALL_TEST_PROMTOOL=$(PROMTOOL) $(GO) test -count=1 -run 'Promtool|DashboardQueriesParse|AlertRules|DashboardUsesExportedMetrics' ./internal/metrics/
	cd services && FLYBALL_TEST_PROMTOOL=$(PROMTOOL) $(GO) test -count=1 -run 'FiresOnARealStack|FireOnARealStack' ./stack/

# Go 1.26's fuzz coordinator can fail a target that found nothing: as
# -fuzztime ends, it may report its own deadline as the target's failure, a
# bare "context deadline exceeded" (golang/go#75804, fixed in Go 1.27). That
# exact ending, with no failing input written, is reported as such and the
# loop goes on; every other failure stops it.
.PHONY: fuzz
fuzz: ## Run every Fuzz target in every module for FUZZTIME each (default 10s)
	$(require-modules)
	@log=$$(mktemp); trap 'rm -f "$$log"' EXIT; spurious=(); \
	for mod in $(MODULES); do \
	  echo "==> fuzz $(modname)"; \
	  cd "$$mod"; \
	  pkgs=$$($(GO) list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}}{{end}}' ./...); \
	  for pkg in $$pkgs; do \
	    list=$$($(GO) test -list '^Fuzz' "$$pkg") || { echo "$$list"; exit 1; }; \
	    for name in $$(grep -E '^Fuzz[[:alnum:]_]*$$' <<<"$$list" || true); do \
	      echo "--> $$pkg $$name ($(FUZZTIME))"; \
	      $(GO) test -run='^$$' -fuzz="^$$name\$$" -fuzztime=$(FUZZTIME) "$$pkg" 2>&1 | tee "$$log" && continue; \
	      ending=$$(sed -n "/^--- FAIL: $$name (/{n;p;n;p;q;}" "$$log"); \
	      if grep -q 'Failing input written to' "$$log" || [[ "$$ending" != $$'    context deadline exceeded\nFAIL' ]]; then exit 1; fi; \
	      echo "--> $$name found nothing: its run ended in Go 1.26's spurious deadline failure (golang/go#75804)"; \
	      spurious+=("$$name"); \
	    done; \
	  done; \
	done; \
	if (($${#spurious[@]})); then echo "==> fuzz: no failing input; Go 1.26's spurious deadline failure (golang/go#75804) ended: $${spurious[*]}"; fi

.PHONY: bench
bench: ## Run Go benchmarks in every module (BENCH_ARGS), then the load test: every tier, or BENCH_TIERS=w1a,w1c; extra BENCH_FLAGS
	$(require-modules)
	@for mod in $(MODULES); do \
	  echo "==> bench $(modname)"; \
	  (cd "$$mod" && $(GO) test -run='^$$' -bench=. -benchmem $(BENCH_ARGS) ./...) || exit 1; \
	done
	@echo "==> bench loadtest: flyball-bench --tiers $${BENCH_TIERS:-all} $${BENCH_FLAGS:-}"
	@cd loadtest && $(GO) run ./cmd/flyball-bench --tiers "$${BENCH_TIERS:-all}" $${BENCH_FLAGS:-}

.PHONY: bench-smoke
bench-smoke: ## Run every module's benchmarks (pkg 100x each, the rest once: several check what they measure), then the load test's ~30s smoke variant (CI: fails if the instrument breaks, never on timings)
	$(require-modules)
	@out=$$(mktemp); trap 'rm -f "$$out"' EXIT; \
	for mod in $(MODULES); do \
	  n=1x; [[ "$(modname)" == pkg ]] && n=100x; \
	  echo "==> bench-smoke $(modname) (-benchtime=$$n)"; \
	  (cd "$$mod" && $(GO) test -run='^$$' -bench=. -benchtime=$$n -benchmem ./...) 2>&1 | tee -a "$$out"; \
	done; \
	if ! grep -q '^Benchmark' "$$out"; then echo "bench-smoke ran no benchmarks: a -bench pattern or a module list is wrong"; exit 1; fi
	@echo "==> bench-smoke loadtest: flyball-bench --smoke --check"
	@cd loadtest && $(GO) run ./cmd/flyball-bench --smoke --check

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

# ---------------------------------------------------------------------------
# Docker compose (deploy/compose): images, up, down, logs, e2e
# ---------------------------------------------------------------------------
# docker-compose (v1) if installed, else the v2 plugin (`docker compose`).
COMPOSE         ?= $(if $(shell command -v docker-compose 2>/dev/null),docker-compose,docker compose)
COMPOSE_DIR     := deploy/compose
# Compose files, relative to deploy/compose. One NATS node instead of three:
# make up COMPOSE_FILES=docker-compose.single.yml
COMPOSE_FILES   ?= docker-compose.yml
COMPOSE_PROJECT ?= flyball
# Extra compose profiles for `make up`, e.g. PROFILES=observability (pulls images).
PROFILES        ?=
IMAGE_TAG       ?= dev
FLYBALL_IMAGE   ?= flyball:$(IMAGE_TAG)
NATS_IMAGE      ?= flyball-nats:$(IMAGE_TAG)
# Seconds `make up` waits for every container to turn healthy.
UP_TIMEOUT      ?= 240
# make down KEEP_VOLUMES=1 keeps the JetStream data volumes.
KEEP_VOLUMES    ?=
# Arguments for `make logs`, e.g. LOGS_ARGS='--tail=50 executor1'.
LOGS_ARGS       ?= -f --tail=200
# The .env file compose reads (next to the compose files): make up checks
# the secrets in it and up-info prints its settings, a variable set in the
# environment winning as in compose (deploy/compose/dotenv.sh).
COMPOSE_ENV     ?= $(COMPOSE_DIR)/.env

compose = env FLYBALL_IMAGE=$(FLYBALL_IMAGE) FLYBALL_NATS_IMAGE=$(NATS_IMAGE) \
  $(COMPOSE) -p $(COMPOSE_PROJECT) $(foreach f,$(COMPOSE_FILES),-f $(COMPOSE_DIR)/$(f))

.PHONY: images
images: build build-nats ## Build bin/flyball, bin/nats-server and the FROM-scratch images flyball:dev, flyball-nats:dev
	@command -v docker >/dev/null || { echo "images: docker not found"; exit 1; }
	@ctx=$$(mktemp -d); trap 'rm -rf "$$ctx"' EXIT; \
	mkdir -p "$$ctx/flyball" "$$ctx/nats/data"; \
	cp bin/flyball $(COMPOSE_DIR)/flyball.Dockerfile "$$ctx/flyball/"; \
	cp -R $(COMPOSE_DIR)/examples "$$ctx/flyball/examples"; \
	if [[ -s /etc/ssl/certs/ca-certificates.crt ]]; then \
	  cp /etc/ssl/certs/ca-certificates.crt "$$ctx/flyball/"; \
	else \
	  echo "warning: no /etc/ssl/certs/ca-certificates.crt on this host: HTTPS targets will fail certificate checks"; \
	  : > "$$ctx/flyball/ca-certificates.crt"; \
	fi; \
	cp bin/nats-server bin/flyball $(COMPOSE_DIR)/nats.Dockerfile "$$ctx/nats/"; \
	cp -R $(COMPOSE_DIR)/nats "$$ctx/nats/nats"; \
	echo "==> docker build $(FLYBALL_IMAGE)"; \
	DOCKER_BUILDKIT=0 docker build -q -f "$$ctx/flyball/flyball.Dockerfile" -t $(FLYBALL_IMAGE) \
	  --label org.opencontainers.image.version=$(VERSION) "$$ctx/flyball"; \
	echo "==> docker build $(NATS_IMAGE)"; \
	DOCKER_BUILDKIT=0 docker build -q -f "$$ctx/nats/nats.Dockerfile" -t $(NATS_IMAGE) \
	  --label org.opencontainers.image.version=$(VERSION) "$$ctx/nats"; \
	docker image ls --format '{{.Repository}}:{{.Tag}}  {{.Size}}' | grep -E '^($(FLYBALL_IMAGE)|$(NATS_IMAGE)) '

# nats-server parses each $$FLYBALL_NATS_<USER>_PASSWORD of accounts.conf as
# config syntax (12345678 a number, true a boolean, a space a parse error):
# refuse such a value, by name, before building or starting anything; and
# warn of every secret left at its published dev default (refuse them with
# FLYBALL_REQUIRE_SECRETS=1).
.PHONY: up-passwords
up-passwords:
	@$(COMPOSE_DIR)/check-passwords.sh "$(COMPOSE_ENV)"

.PHONY: up
up: up-passwords images ## Start the compose stack (3-node NATS, every service, demo target) and wait until all are healthy
	$(compose) $(foreach p,$(PROFILES),--profile $(p)) up -d --remove-orphans
	@$(COMPOSE_DIR)/wait-healthy.sh $(UP_TIMEOUT) $(compose)
	@$(MAKE) --no-print-directory up-info

# With docker-compose.tls.yml the NATS port speaks TLS only: the host CLI
# needs tls:// and the dev CA.
up_tls      = $(filter docker-compose.tls.yml,$(COMPOSE_FILES))
# What `make down` and `make logs` need to find this stack again.
up_vars     = $(if $(filter-out flyball,$(COMPOSE_PROJECT)), COMPOSE_PROJECT=$(COMPOSE_PROJECT))$(if $(filter-out docker-compose.yml,$(COMPOSE_FILES)), COMPOSE_FILES=\"$(COMPOSE_FILES)\")

.PHONY: up-info
# Settings as compose reads them: the environment, else $(COMPOSE_ENV). A
# secret that is set is printed as its variable, never its value; one at
# its published dev default as that default.
up-info: ## Print the compose stack's addresses and a quickstart (the end of make up)
	@. $(COMPOSE_DIR)/dotenv.sh; read_env_file "$(COMPOSE_ENV)"; \
	setting() { lookup "$$1"; echo "$${v:-$$2}"; }; \
	load=; ref() { lookup "$$1"; if [[ -z $$v ]]; then r=$$2; else r="\$$$$1"; [[ $$where == "the environment" ]] || load=1; fi; }; \
	ref FLYBALL_API_TOKEN flyball-dev-token; tok=$$r; \
	ref FLYBALL_NATS_CLI_PASSWORD dev-cli; pw=$$r; [[ $$pw == dev-cli ]] || pw="\"$$pw\""; \
	api="http://127.0.0.1:$$(setting FLYBALL_API_PORT 8080)"; nats_port=$$(setting FLYBALL_NATS_PORT 4222); \
	target_port=$$(setting FLYBALL_TARGET_PORT 8000); monitor_port=$$(setting FLYBALL_NATS_MONITOR_PORT 8222); \
	echo; \
	echo "flyball is up ($(COMPOSE_PROJECT)):"; \
	echo "  HTTP API     $$api   (token: $$tok$$([[ $$tok == flyball-dev-token ]] && echo ', the dev default'))"; \
	echo "  demo target  http://127.0.0.1:$$target_port   (http://target:8000 inside the stack)"; \
	echo "  NATS         $(if $(up_tls),tls,nats)://127.0.0.1:$$nats_port   monitoring http://127.0.0.1:$$monitor_port"; \
	echo; \
	if [[ -n $$load ]]; then \
	  echo "Secrets below are set in $(COMPOSE_ENV), not in this shell; load them first:"; \
	  echo "  set -a; . $(COMPOSE_ENV); set +a"; \
	fi; \
	echo "Quickstart: a task that calls the demo target every 5s (the CLI connects as NATS user cli):"; \
	echo "  export NATS_URL=$(if $(up_tls),tls,nats)://127.0.0.1:$$nats_port NATS_USER=cli NATS_PASSWORD=$$pw$(if $(up_tls), NATS_CA=$(COMPOSE_DIR)/tls/ca.pem)"; \
	echo "  bin/flyball task create -f $(COMPOSE_DIR)/examples/demo-task.json"; \
	echo "  bin/flyball runs demo"; \
	echo "  curl -s 'http://127.0.0.1:$$target_port/requests?task=demo'"; \
	echo "The same through the HTTP API, or with the CLI inside the compose network:"; \
	echo "  curl -s -H \"Authorization: Bearer $$tok\" $$api/api/v1/tasks -d @$(COMPOSE_DIR)/examples/demo-task.json"; \
	echo "  $(COMPOSE) -p $(COMPOSE_PROJECT) $(foreach f,$(COMPOSE_FILES),-f $(COMPOSE_DIR)/$(f)) run --rm cli runs demo"; \
	echo "Logs: make logs$(up_vars)    Stop and remove everything (volumes too): make down$(up_vars)"

.PHONY: down
down: ## Stop the compose stack and remove its containers, network and volumes (KEEP_VOLUMES=1 keeps data)
	$(compose) --profile tools --profile observability down --remove-orphans $(if $(KEEP_VOLUMES),,-v)

.PHONY: logs
logs: ## Follow the compose stack's logs (LOGS_ARGS='--tail=50 executor1' narrows)
	$(compose) logs $(LOGS_ARGS)

.PHONY: e2e
e2e: natscli-install ## End-to-end test on the compose stack: up, runs, NATS node and executor kills, timer handover, breaker, DLQ, down; then the single-node and TLS files and a full restart
	COMPOSE="$(COMPOSE)" MAKE="$(MAKE)" NATS_CLI="$(NATS_CLI)" bash $(COMPOSE_DIR)/e2e.sh
	COMPOSE="$(COMPOSE)" MAKE="$(MAKE)" bash $(COMPOSE_DIR)/e2e-variants.sh
