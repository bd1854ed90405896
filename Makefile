# torch_openreg: WebAssembly devices for PyTorch.
#
#   make demo    install what is missing, build, train a small model on openreg devices
#   make test    install what is missing, build, run every check and test
#   make bench   run the benchmarks and write docs/performance.md
#   make fuzz    fuzz the module loader and the runtime API for longer (FUZZ_SECONDS=300)
#
# Each target is idempotent: a machine that has everything skips the installs.

SHELL := /bin/bash
CARGO ?= cargo
VENV := $(CURDIR)/.venv
PY := $(VENV)/bin/python
# The python crate's build script finds torch through this virtualenv.
export VIRTUAL_ENV := $(VENV)

# What every clone on this machine would build or download the same way lives in
# the user's cache, so a fresh clone (CI's) does not start from nothing:
# - Cargo's build directory. The dependencies (wasmtime above all) are most of a
#   cold build and the same for every clone (pyo3's build, which looks at the
#   clone's .venv, is redone). Our own crates are not, and cargo alone would
#   not tell two clones apart (it compares file times, and the artifacts'
#   names do not depend on the path): their build scripts rerun when
#   OPENREG_SOURCE_DIR changes, so a build from another clone recompiles them.
#   Cargo locks the directory only while it compiles; recipes that build and
#   then run what they built hold $(SHARED_BUILD) throughout, so that another
#   clone cannot replace it in between (flock; without it, run one clone's make
#   at a time). Set CARGO_TARGET_DIR to build elsewhere.
# - The Python packages (torch from PyPI brings 3 GB of CUDA wheels, 4 GB
#   unpacked): uv installs them, from its cache (~/.cache/uv) once it has them,
#   by hard links. pip took 90-140 s per fresh .venv here, uv 2 s.
CACHE_HOME := $(or $(OPENREG_CACHE_DIR),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/torch_openreg)
export CARGO_TARGET_DIR ?= $(CACHE_HOME)/target
export OPENREG_SOURCE_DIR := $(CURDIR)
SHARED_BUILD := $(if $(shell command -v flock),mkdir -p $(CARGO_TARGET_DIR) && flock $(CARGO_TARGET_DIR)/make.lock)

.PHONY: demo test bench coverage fuzz deps venv develop lint rust-test py-test fmt clean

deps:
	@scripts/install-deps.sh

# The Python environment: torch pinned to 2.15.0 (the C++ shim is ABI-bound to it).
venv: $(VENV)/.installed
$(VENV)/.installed: scripts/requirements.txt
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q uv==0.13.9
	$(VENV)/bin/uv pip install -q --python $(PY) -r scripts/requirements.txt
	@touch $@

# Builds the extension (pyo3 + C++ shim) into the virtualenv, editable, optimized:
# what users run (see the profiles in Cargo.toml).
develop: deps venv
	$(SHARED_BUILD) $(VENV)/bin/maturin develop -q --release -m python/Cargo.toml

demo: develop
	$(PY) examples/train_mlp.py

# Clippy checks in the release profile, so its build scripts and proc-macros
# are the test build's; it links nothing, so the shim's C++ is not compiled
# for it (build.rs).
lint: deps venv
	$(CARGO) fmt --all -- --check
	OPENREG_CHECK_ONLY=1 $(CARGO) clippy --release --workspace --all-targets -- -D warnings

# The release profile shares the dependencies' build with the extension.
rust-test: deps venv
	$(SHARED_BUILD) $(CARGO) test --release --workspace --exclude torch-openreg

py-test: develop
	$(PY) -m pytest -q -n auto --maxprocesses=4 tests/python

test: lint rust-test py-test

# Benchmarks use release builds of everything (the debug shim would distort them).
bench: develop
	$(SHARED_BUILD) $(CARGO) run -q --release -p openreg-host --example bench -- --markdown docs/performance.md
	$(PY) benchmarks/torch_bench.py --markdown docs/performance.md

# The loader fed generated modules, and random runtime programs against a model
# (host/tests/fuzz.rs); make test runs the same for a few seconds.
FUZZ_SECONDS ?= 300
fuzz: deps
	$(SHARED_BUILD) env OPENREG_FUZZ_SECONDS=$(FUZZ_SECONDS) OPENREG_FUZZ_CASES=2000 \
		$(CARGO) test --release -p openreg-host --test fuzz -- --nocapture

# Which OpInfo ops the devices compute themselves (docs/op-coverage.md; a few minutes).
coverage: develop
	$(PY) -m torch_openreg.coverage --out docs/op-coverage.md

fmt:
	$(CARGO) fmt --all

# Our crates' builds only: the dependencies' serve every clone.
clean:
	$(CARGO) clean --release -p openreg-host -p openreg-device-kernels -p torch-openreg
