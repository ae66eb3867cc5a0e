# huddle: `make demo` runs the main job, `make test` runs every test, `make bench` measures.
# Each target first runs scripts/bootstrap, which installs whatever is missing.
SHELL := /bin/bash
export PATH := $(HOME)/.cargo/bin:$(PATH)
CARGO ?= cargo
HUDDLE := target/release/huddle
# Where shared/ (reference topologies and matrices) lives; CI clones the repo beside it.
export HUDDLE_SHARED ?= $(abspath ../shared)

# Areas add their own steps to these from mk/<area>.mk.
TEST_STEPS :=
BENCH_STEPS :=
BUILD_STEPS :=

.PHONY: bootstrap build demo test lint bench
-include mk/*.mk

bootstrap:
	@scripts/bootstrap

build: bootstrap
	$(CARGO) build --release --workspace
	@for s in $(BUILD_STEPS); do $(MAKE) --no-print-directory $$s || exit 1; done

demo: build
	scripts/demo

lint: bootstrap
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

test: lint build
	# The preloaded agent is a cdylib that no test target depends on: build it beside the
	# test binaries (target/debug), where huddle looks for it.
	$(CARGO) build --profile test -p agent
	$(CARGO) test --workspace
	@for s in $(TEST_STEPS); do $(MAKE) --no-print-directory $$s || exit 1; done

# Benchmarks write bench/results/<area>.md; collect-benchmarks joins them into BENCHMARKS.md.
bench: build
	@mkdir -p bench/results
	@for r in bench/*/run; do echo "== $$r"; $$r || exit 1; done
	scripts/collect-benchmarks > BENCHMARKS.md
