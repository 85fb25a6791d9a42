# Shortcuts for the scripts in scripts/, and the install.
.PHONY: test soak demo bench lint format fuzz install uninstall realstack realstack-deps deb release

PREFIX ?= /usr/local
DESTDIR ?=
# release (the default) builds with the Swift runtime linked in, so the
# installed binaries need no toolchain; debug installs what `swift build`
# (or the tests) built already. BIN=DIR installs the executables in DIR
# without building.
CONFIG ?= release
BIN ?=
# make soak: builds, then runs the whole suite RUNS times beside LOAD CPU
# hogs (scripts/soak).
RUNS ?= 5
LOAD ?= 2

test:
	./scripts/test

soak:
	swift build --build-tests
	./scripts/soak $(RUNS) --load $(LOAD)

demo:
	./scripts/demo

bench:
	./scripts/bench

lint:
	swift format lint --strict --recursive Package.swift Sources Tests
	./scripts/lint-imports

format:
	swift format --in-place --recursive Package.swift Sources Tests

fuzz:
	./scripts/fuzz

# The real-stack bench (docs/realstack.md): a VM with the kernel's Bluetooth,
# the distribution's bluetoothd and N Bumble SBeacons; the release binary
# run against them. BEACONS and SCENARIO as scripts/realstack takes them.
BEACONS ?= 10
SCENARIO ?= provision
realstack-deps:
	./scripts/realstack --deps

realstack:
	./scripts/release-build beaconbench
	./scripts/realstack --beacons $(BEACONS) --scenario $(SCENARIO)

# The executables in PREFIX/bin; shipped profiles and batches in
# PREFIX/share/beaconbench (the binary finds them from its own place); the
# man page and the bash, zsh and fish completions, written by the binary
# from its command table; the documentation in PREFIX/share/doc/beaconbench.
install:
	PREFIX="$(PREFIX)" DESTDIR="$(DESTDIR)" CONFIG="$(CONFIG)" BIN="$(BIN)" ./scripts/install

uninstall:
	PREFIX="$(PREFIX)" DESTDIR="$(DESTDIR)" ./scripts/install --uninstall

# The Debian packages (beaconbench, beaconbench-sim) from the release build,
# in .build/deb, checked by lintian (scripts/make-deb; docs/install.md).
deb:
	BIN="$(BIN)" ./scripts/make-deb

# The .debs, a tarball, the SPDX bill of materials and SHA256SUMS signed
# with BEACONBENCH_RELEASE_KEY, in .build/release-artifacts (scripts/make-release).
release:
	BIN="$(BIN)" ./scripts/make-release
