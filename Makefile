# torch_openreg: WebAssembly devices for PyTorch.
#
#   make demo    install what is missing, build, run the demo
#   make test    install what is missing, build, run every check and test
#   make bench   run the benchmarks and write docs/performance.md
#
# Each target is idempotent: a machine that has everything skips the installs.

SHELL := /bin/bash
CARGO ?= cargo

.PHONY: demo test bench deps lint fmt clean

deps:
	@scripts/install-deps.sh

demo: deps
	$(CARGO) run -q -p openreg-host --example quickstart

lint: deps
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

test: lint
	$(CARGO) test --workspace

bench: deps
	$(CARGO) run -q --release -p openreg-host --example bench -- --markdown docs/performance.md

fmt:
	$(CARGO) fmt --all

clean:
	$(CARGO) clean
