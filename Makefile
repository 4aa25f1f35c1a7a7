# omx: the two commands a new user needs are `make demo` and `make test`.
PREFIX ?= /usr/local
CARGO ?= cargo
RELEASE_DIR := target/release

.PHONY: all build lib provider demo demo-sim test test-c test-rust test-ofi test-mpi test-install test-wire test-sockets test-fs test-memcpy bench-mpi lint soak-sim sim-scale soak fuzz fuzz-smoke bench-engine bench bench-loss install clean

all: build

build: lib
	$(CARGO) build --release --workspace

## libmyriexpress.so.0 (with MX's symbol version nodes) and libmyriexpress.a, linked
## from the Rust static library so that only the MX ABI is exported.
LIBDIR := build/lib
lib:
	$(CARGO) build --release -p omx-capi
	mkdir -p $(LIBDIR)
	$(CC) -shared -o $(LIBDIR)/libmyriexpress.so.0 -Wl,-soname,libmyriexpress.so.0 \
		-Wl,--version-script=crates/omx-capi/myriexpress.map -Wl,--gc-sections \
		-Wl,--whole-archive $(RELEASE_DIR)/libmyriexpress.a -Wl,--no-whole-archive -lpthread -ldl -lm
	ln -sf libmyriexpress.so.0 $(LIBDIR)/libmyriexpress.so
	ln -sf libmyriexpress.so.0 $(LIBDIR)/libopen-mx.so.0
	ln -sf libmyriexpress.so.0 $(LIBDIR)/libopen-mx.so
	cp $(RELEASE_DIR)/libmyriexpress.a $(LIBDIR)/libmyriexpress.a

## The libfabric provider "omx" (docs/LIBFABRIC.md): build/lib/libfabric/libomx-fi.so,
## loaded by libfabric from FI_PROVIDER_PATH; finds libmyriexpress.so.0 in $ORIGIN/..
PROVIDER_SRC := fabric/omx_fi.c fabric/omx_fi_av.c fabric/omx_fi_cq.c fabric/omx_fi_ep.c fabric/omx_fi_wait.c fabric/omx_fi_rma.c fabric/omx_fi_atomic.c fabric/omx_fi_poll.c
provider: lib $(LIBDIR)/libfabric/libomx-fi.so
$(LIBDIR)/libfabric/libomx-fi.so: $(PROVIDER_SRC) fabric/omx_fi.h include/myriexpress.h include/mx_extensions.h $(LIBDIR)/libmyriexpress.so.0
	mkdir -p $(LIBDIR)/libfabric
	$(CC) -std=c11 -O2 -g -Wall -Wextra -Werror -fPIC -shared -fvisibility=hidden -Iinclude \
		-o $@ $(PROVIDER_SRC) -L$(LIBDIR) -l:libmyriexpress.so.0 -lfabric -lpthread \
		'-Wl,-rpath,$$ORIGIN/..' -Wl,-z,defs

## The main job: two hosts (network namespaces, veth) ping-pong 0 B to 4 MiB with omx_perf,
## medians of 3 passes beside the raw-frame floor (raw_pingpong, raw_stream) of the same run.
demo: build
	$(CARGO) build --release -p omx-transport --example raw_pingpong --example raw_stream
	scripts/demo.sh

## The protocol alone: two simulated hosts, no network needed; the times are those of a
## link model, not of this machine.
demo-sim: build
	$(RELEASE_DIR)/omx-sim-pingpong -N 100

## Every test: unit, property, simulation, fault-injection and hostile-input tests, the
## C, libfabric and MPI suites, each run to its end; one summary line of them all, last
## (tests/all.sh). A skip is counted and named; under CI=true or OMX_TEST_STRICT=1 it fails.
test:
	MAKE='$(MAKE)' tests/all.sh

## The C headers compile as C99/C11/C++11 and match the spec's ABI layout; the MX C
## test suite runs against libmyriexpress on test hosts (skipped when not root).
test-c: lib
	$(CARGO) build --release -p omx-tools --bin omx_copyd
	tests/c/abi/compile_all.sh
	tests/c/api/run.sh

## The libfabric provider: fi_info, fi_pingpong (one host and two) and the C tests
## of tests/ofi (skipped when not root or without libfabric).
test-ofi:
	@if echo '#include <rdma/providers/fi_prov.h>' | $(CC) -E - >/dev/null 2>&1; then \
		$(MAKE) provider; else echo "libfabric headers missing: provider not built"; fi
	tests/ofi/run.sh

## The wire from outside: tcpdump, tshark with dist/wireshark/omx.lua, and omx_dump
## decode real traffic of every class between two namespace hosts (root; tshark, tcpdump).
test-wire:
	$(CARGO) build --release -p omx-tools --bin omx_dump --bin omx_testpeer
	tests/wire/run.sh

## Sockets over omx: a C conformance suite over the kernel and over omx (same assertions),
## then unmodified programs (python3, nc, curl, iperf3) between two namespace hosts,
## preloaded with omx_sockets or not; bytes checked, carried or fallen back (root).
test-sockets:
	$(CARGO) build --release -p omx-sockets
	tests/sockets/run.sh

## omxfs (docs/FILES.md): a random-operation exerciser (also under OMX_FAULTS), tar,
## cp -a, rsync, git, dd, fio, locks across two hosts, a server restart (root, FUSE).
test-fs:
	$(CARGO) build --release -p omx-fs --bins --examples
	tests/fs/run.sh

## Transparent asynchronous memcpy: a seeded random threaded C program, a program with
## its own SIGSEGV handler, python3, sort and gzip give the same bytes with and without
## libomx_memcpy.so, on the copy thread and on omx_copyd (docs/COPY.md).
test-memcpy:
	$(CARGO) build --release -p omx-memcpy -p omx-tools --bin omx_copyd
	tests/memcpy/run.sh

## make install to a temporary prefix, then a C program built with pkg-config alone runs.
test-install:
	tests/install/run.sh

test-rust:
	$(CARGO) test --workspace --all-targets

## Open MPI 4.1 over the omx provider (tests/mpi): p2p 0 B-8 MiB, probe/mprobe/cancel,
## truncation, collectives, MPI_THREAD_MULTIPLE on 1, 2 and 4 namespace hosts, plus an
## ob1 sanity run (root; skipped without Open MPI). With libfabric's headers present the
## provider is built and its absence is a failure, not a skip.
test-mpi:
	@if echo '#include <rdma/providers/fi_prov.h>' | $(CC) -E - >/dev/null 2>&1; then \
		$(MAKE) provider && MPI_REQUIRE_PROVIDER=1 tests/mpi/run.sh; \
	else echo "libfabric headers missing: provider not built"; tests/mpi/run.sh; fi

## MPI ping-pong: Open MPI over omx vs TCP vs libfabric tcp, fi_pingpong, omx_perf (root).
bench-mpi: build provider
	bench/mpi_pingpong.sh $(MTU)

## omx against kernel TCP under the same injected frame loss (nftables ingress drop on
## both hosts, 0-5%): 4 MiB throughput and 8 B latency percentiles (root, a few minutes).
bench-loss:
	bench/loss.sh

## Formatter and linter, as CI runs them.
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

## Long simulated soak: many seeds x 10,000 messages under loss, duplication, reordering.
SOAK_SEEDS ?= 16
soak-sim: build
	$(RELEASE_DIR)/omx-sim-soak --seeds $(SOAK_SEEDS) --messages 10000

## Simulated clusters on the real engine (omx-sim-scale): 16 to 1,024 hosts behind a
## switch model, all-to-all, ring, incast and shifts, every message checked exactly once;
## the table of docs/PERFORMANCE.md; CSV and plot in bench/results/scale-<date-time>/.
## Large all-to-all stops at 256 hosts and small all-to-all at 512 (n² messages; the
## 1,024-host run: SCALE_HOSTS=1024 SCALE_SCENARIOS=a2a-small, about 4 minutes).
SCALE_SCENARIOS ?= a2a-small,a2a-large,ring,incast,shifts
sim-scale:
	$(CARGO) build --release -p omx-sim --bin omx-sim-scale
	d=bench/results/scale-$$(date +%Y%m%d-%H%M%S) && mkdir -p $$d && \
	$(RELEASE_DIR)/omx-sim-scale $(if $(SCALE_HOSTS),--hosts $(SCALE_HOSTS)) --scenario $(SCALE_SCENARIOS) \
		--csv $$d/scale.csv && \
	{ python3 bench/plot_scale.py $$d/scale.csv $$d/scale.png && echo "$$d/scale.csv, $$d/scale.png" \
		|| echo "no plot (python3-matplotlib missing)"; }

## Soak on real frames (root): omx_soak on 2 and 4 namespace hosts, native MTU 9000 and
## 1500 and MX wire, under injected loss, duplication, reordering, and bit flips where
## OMX_CHECKSUM=1 catches them (native runs); every message checked.
## SOAK_MESSAGES in total (default 1000000); see scripts/soak.sh for the other knobs.
soak: build
	scripts/soak.sh

## Coverage-guided fuzzing of the frame decoder (needs nightly and cargo-fuzz).
FUZZ_SECONDS ?= 300
fuzz:
	cd fuzz && $(CARGO) +nightly fuzz run decode -- -max_total_time=$(FUZZ_SECONDS)

## A short run of each fuzz target (CI runs it; `make test` replays the stored corpus).
## New inputs go to a temporary directory, not to fuzz/corpus.
FUZZ_SMOKE_SECONDS ?= 60
fuzz-smoke:
	cd fuzz && for t in decode engine; do \
		d=$$(mktemp -d) && $(CARGO) +nightly fuzz run $$t $$d corpus/$$t -- \
			-max_total_time=$(FUZZ_SMOKE_SECONDS) && rm -rf $$d || exit 1; \
	done

## Engine micro-benchmark (criterion).
bench-engine:
	$(CARGO) bench -p omx-sim --bench engine

VERSION := 0.1.0
## Programs built with the installed .pc files find the library in the prefix by their
## run path; /usr/lib is searched by default and needs none.
comma := ,
PC_RPATH := $(if $(filter /usr /usr/,$(PREFIX)),,-Wl$(comma)-rpath$(comma)$${libdir} )

MAN1_TOOLS := omx_info omx_perf omx_counters omx_endpoint_info omx_hostname omx_init_peers \
	omx_prepare_binding omx_stream omx_soak omx_dump
install: build provider
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig \
		$(DESTDIR)$(PREFIX)/lib/libfabric
	install -m 755 $(LIBDIR)/libfabric/libomx-fi.so $(DESTDIR)$(PREFIX)/lib/libfabric/
	install -m 755 $(RELEASE_DIR)/omx_info $(RELEASE_DIR)/omx_perf $(RELEASE_DIR)/omx_counters \
		$(RELEASE_DIR)/omx_endpoint_info $(RELEASE_DIR)/omx_hostname \
		$(RELEASE_DIR)/omx_init_peers $(RELEASE_DIR)/omx_prepare_binding \
		$(RELEASE_DIR)/omx_stream $(RELEASE_DIR)/omx_soak $(RELEASE_DIR)/omx_dump \
		$(RELEASE_DIR)/omx-sim-pingpong $(RELEASE_DIR)/omx-sim-soak $(DESTDIR)$(PREFIX)/bin/
	cp -P $(LIBDIR)/libmyriexpress.so.0 $(LIBDIR)/libmyriexpress.so $(LIBDIR)/libopen-mx.so.0 \
		$(LIBDIR)/libopen-mx.so $(LIBDIR)/libmyriexpress.a $(DESTDIR)$(PREFIX)/lib/
	install -m 644 include/myriexpress.h include/mx_extensions.h include/mx_raw.h include/mx_io.h include/open-mx.h $(DESTDIR)$(PREFIX)/include/
	install -d $(DESTDIR)$(PREFIX)/include/mx_internals
	install -m 644 include/mx_internals/mx__fops.h include/mx_internals/mx__driver_interface.h $(DESTDIR)$(PREFIX)/include/mx_internals/
	for pc in omx myriexpress; do \
		sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' -e 's|@RPATH@|$(PC_RPATH)|g' \
			include/$$pc.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/$$pc.pc; \
	done
	# omxd, the host service for unprivileged users (docs/SECURITY.md), and its unit.
	install -d $(DESTDIR)$(PREFIX)/sbin $(DESTDIR)$(PREFIX)/lib/systemd/system
	install -m 755 $(RELEASE_DIR)/omxd $(DESTDIR)$(PREFIX)/sbin/
	sed 's|/usr/local|$(PREFIX)|g' dist/omxd.service > $(DESTDIR)$(PREFIX)/lib/systemd/system/omxd.service
	# omx_copyd, the host-wide copy service, and the asynchronous memcpy preload with
	# its launcher (docs/COPY.md); omx_memcpy finds the library in ../lib.
	install -m 755 $(RELEASE_DIR)/omx_copyd $(DESTDIR)$(PREFIX)/sbin/
	install -m 755 $(RELEASE_DIR)/omx_memcpy $(DESTDIR)$(PREFIX)/bin/
	install -m 755 $(RELEASE_DIR)/libomx_memcpy.so $(DESTDIR)$(PREFIX)/lib/
	# Manual pages, written by each tool itself (`TOOL --man`).
	install -d $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/man/man8
	for t in $(MAN1_TOOLS); do $(RELEASE_DIR)/$$t --man > $(DESTDIR)$(PREFIX)/share/man/man1/$$t.1; done
	$(RELEASE_DIR)/omxd --man > $(DESTDIR)$(PREFIX)/share/man/man8/omxd.8
	$(RELEASE_DIR)/omx_copyd --man > $(DESTDIR)$(PREFIX)/share/man/man8/omx_copyd.8
	# The Wireshark dissector, in the global plugin directory of the prefix (docs/TOOLS.md).
	install -d $(DESTDIR)$(PREFIX)/lib/wireshark/plugins
	install -m 644 dist/wireshark/omx.lua $(DESTDIR)$(PREFIX)/lib/wireshark/plugins/

clean:
	$(CARGO) clean

## Benchmark suite: omx vs raw frames, TCP, libfabric, UCX on two namespaces (root).
## Results in bench/results/<date-time>/. MTU=9000 by default; RUNS=3. Then the
## instructions per 8 B round trip (bench/instructions.sh: network, shared memory,
## libfabric; the regression benchmark of the small-message path).
MTU ?= 9000
bench:
	MTU=$(MTU) bench/run.sh $(MTU)
	bench/instructions.sh
