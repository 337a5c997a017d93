# flashd - userspace FTL and network export for host-based flash cards.
#
#   make            build everything into build/
#   make run        build flashd (and flashctl), then serve the embedded default
#                   (simulated ioDrive Duo); LISTEN=HOST:PORT... instead of
#                   127.0.0.1:10809
#   make check      build and run every test (what CI runs); ends with
#                   "N passed, N failed, N skipped"
#   make check-quick  the edit-test loop: unit tests without sanitizers, the
#                   core NBD suites (a few minutes)
#   make check-long long explorations: the crash test on more seeds
#   make check-drbd the DRBD pair test in two VMs (11-14 min; .ci/run runs it too)
#   make bench      benchmark flashd against nbdkit and qemu-nbd, then the
#                   timing-model rows (not part of check; about 17 min)
#   make bench-timing  the timing-model rows alone: flashd against flashctl
#                   bench on the simulated Duo (about 5 min)
#   make install    install programs, plugins, unit, man pages, example config
#                   (PREFIX=/usr/local, DESTDIR=; see "Installing" below)
#   make uninstall  remove what make install installed (same PREFIX and DESTDIR)
#
# Missing Debian packages are installed by scripts/deps.sh (apt-get).

CC      ?= gcc
BUILD   ?= build
OPT     ?= -O2
CFLAGS  ?= $(OPT) -g
WARN    := -Wall -Wextra -Werror -Wno-unused-parameter
CPPFLAGS_ALL := -std=gnu11 -D_GNU_SOURCE -fPIC -pthread -I. $(WARN) $(CFLAGS) $(EXTRA_CFLAGS)
LDLIBS_ALL   := -pthread -lm

DEPS_STAMP := $(BUILD)/.deps-build

# Library code: common/, hw/ and ftl/, linked into every program and plugin.
LIB_SRCS := $(wildcard common/*.c) $(wildcard hw/*.c) $(wildcard ftl/*.c)
LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/obj/%.o)
LIB      := $(BUILD)/libflashd.a

# flashctl (tools/flashctl/): the management tool, a client of flashd's
# control socket and of the library; no server code is linked into it.
FLASHCTL_SRCS := $(wildcard tools/flashctl/*.c)
FLASHCTL_OBJS := $(FLASHCTL_SRCS:%.c=$(BUILD)/obj/%.o)
SERVER_SRCS := $(wildcard server/*.c)
SERVER_OBJS := $(SERVER_SRCS:%.c=$(BUILD)/obj/%.o)

# The dashboard (server/dashboard/: HTML, JS, CSS) is embedded into flashd as
# C arrays written by server/dashboard/embed.sh; served on the control socket.
DASH_FILES := $(wildcard server/dashboard/*.html server/dashboard/*.js server/dashboard/*.css)
DASH_OBJ   := $(BUILD)/obj/gen/dashboard_files.o

UNIT_SRCS := $(wildcard tests/unit/t_*.c)
UNIT_BINS := $(UNIT_SRCS:tests/unit/%.c=$(BUILD)/tests/%)

# The unit tests again, built with AddressSanitizer and UBSan (any report
# fails the test): t_NAME-san.  The model test runs fewer operations there.
SAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
SAN_LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/san/obj/%.o)
SAN_LIB  := $(BUILD)/san/libflashd.a
SAN_BINS := $(UNIT_SRCS:tests/unit/%.c=$(BUILD)/tests/%-san)

PROGS := $(BUILD)/flashctl $(BUILD)/sendpath $(BUILD)/pagecopy
ifneq ($(SERVER_SRCS),)
PROGS += $(BUILD)/flashd
endif
ifneq ($(wildcard plugins/nbdkit/*.c),)
PROGS += $(BUILD)/nbdkit-flashd-plugin.so
endif
ifneq ($(wildcard plugins/tcmu/*.c),)
PROGS += $(BUILD)/handler_flashd.so
endif

.PHONY: all run check check-quick check-long check-drbd bench bench-timing deps clean install uninstall
all: $(PROGS) $(UNIT_BINS) $(SAN_BINS)

# Debian packages: checked once per build directory, re-checked when deps.sh changes.
$(DEPS_STAMP): scripts/deps.sh
	@mkdir -p $(BUILD)
	scripts/deps.sh build
	@touch $@

$(BUILD)/obj/%.o: %.c $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS_ALL) $(shell pkg-config --cflags libevent libsystemd inih openssl 2>/dev/null) -MMD -MP -c -o $@ $<

$(LIB): $(LIB_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/flashctl: $(FLASHCTL_OBJS) $(LIB)
	$(CC) $(CPPFLAGS_ALL) -o $@ $^ $(LDLIBS_ALL)

# how a 1 MiB reply's send path costs the sender (make bench; issue 14)
$(BUILD)/sendpath: tests/bench/sendpath.c
	$(CC) $(CPPFLAGS_ALL) -o $@ $< $(LDLIBS_ALL)

# the bound of an in-process random 4 KiB read on this machine (make bench)
$(BUILD)/pagecopy: tests/bench/pagecopy.c $(LIB)
	$(CC) $(CPPFLAGS_ALL) -o $@ $^ $(LDLIBS_ALL)

$(BUILD)/gen/dashboard_files.c: $(DASH_FILES) server/dashboard/embed.sh
	@mkdir -p $(dir $@)
	server/dashboard/embed.sh $(DASH_FILES) > $@.tmp && mv $@.tmp $@

$(DASH_OBJ): $(BUILD)/gen/dashboard_files.c $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS_ALL) -c -o $@ $<

$(BUILD)/flashd: $(SERVER_OBJS) $(DASH_OBJ) $(LIB)
	$(CC) $(CPPFLAGS_ALL) -o $@ $^ $(shell pkg-config --libs libevent_pthreads libevent_openssl libevent libsystemd inih openssl) $(LDLIBS_ALL)

$(BUILD)/nbdkit-flashd-plugin.so: $(wildcard plugins/nbdkit/*.c) $(LIB) $(DEPS_STAMP)
	$(CC) $(CPPFLAGS_ALL) -shared -o $@ $(wildcard plugins/nbdkit/*.c) $(LIB) $(LDLIBS_ALL)

$(BUILD)/handler_flashd.so: $(wildcard plugins/tcmu/*.c plugins/tcmu/*.h) $(DEPS_STAMP)
	$(CC) $(CPPFLAGS_ALL) $(shell pkg-config --cflags libnbd) -shared -o $@ $(wildcard plugins/tcmu/*.c) $(shell pkg-config --libs libnbd) $(LDLIBS_ALL)

$(BUILD)/tests/%: $(BUILD)/obj/tests/unit/%.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS_ALL) -o $@ $^ $(LDLIBS_ALL) $(LDLIBS_TEST)

# unit tests of server code link the server file they test (pure code only)
$(BUILD)/tests/t_health: $(BUILD)/obj/server/health.o $(BUILD)/obj/server/drbd.o
$(BUILD)/tests/t_health-san: $(BUILD)/san/obj/server/health.o $(BUILD)/san/obj/server/drbd.o
# and of flashctl's: the steady-state rule of its bench
$(BUILD)/tests/t_steady: $(BUILD)/obj/tools/flashctl/steady.o
$(BUILD)/tests/t_steady-san: $(BUILD)/san/obj/tools/flashctl/steady.o

# this test makes allocations fail: malloc and aligned_alloc are wrapped
$(BUILD)/tests/t_ftl_review $(BUILD)/tests/t_ftl_review-san: LDLIBS_TEST := -Wl,--wrap=malloc,--wrap=aligned_alloc
# and this one replaces an image between its open and its lock: flock is wrapped
$(BUILD)/tests/t_nand_sim $(BUILD)/tests/t_nand_sim-san: LDLIBS_TEST := -Wl,--wrap=flock

$(BUILD)/san/obj/%.o: %.c $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS_ALL) $(SAN_FLAGS) -DT_MODEL_DEFAULT_OPS=60000 -MMD -MP -c -o $@ $<

$(SAN_LIB): $(SAN_LIB_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/tests/%-san: $(BUILD)/san/obj/tests/unit/%.o $(SAN_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS_ALL) $(SAN_FLAGS) -o $@ $^ $(LDLIBS_ALL) $(LDLIBS_TEST)

# only what it runs and flashctl to manage it: the tests (and their
# sanitizer builds) are for make check.  LISTEN: one --listen per word.
run: $(BUILD)/flashd $(BUILD)/flashctl
	scripts/deps.sh check
	$(strip $(BUILD)/flashd --foreground $(patsubst %,--listen %,$(LISTEN)))

# tests/run.sh runs independent tests in parallel (-j N, FLASHD_TEST_JOBS);
# FLASHD_DEPS_INSTALLED=1: a test missing a program deps.sh installs fails
# instead of skipping (tests/functions.sh, requires)
# The build before it runs a job per core unless make was given -j itself
# (a fresh clone builds everything twice, plain and with sanitizers).
CHECK_BUILD_JOBS = $(if $(filter -j%,$(MAKEFLAGS)),,-j$(shell nproc))
check:
	$(MAKE) --no-print-directory $(CHECK_BUILD_JOBS) all
	scripts/deps.sh check
	FLASHD_DEPS_INSTALLED=1 tests/run.sh

check-quick: $(PROGS) $(UNIT_BINS)
	scripts/deps.sh check
	FLASHD_DEPS_INSTALLED=1 tests/run.sh --quick

check-long: $(UNIT_BINS)
	tests/run.sh --long

# the DRBD pair test (tests/vm/test-drbd.sh: two VMs, 11-14 min under TCG),
# not part of check; .ci/run runs it after check.  If it skips (not root, no
# TCG) this fails: tests/run.sh wants at least one pass.
check-drbd: all
	scripts/deps.sh check
	tests/run.sh test-drbd

# the timing-model rows run after the rest, never beside it (one recipe:
# make -j cannot overlap them); bench-timing runs them alone
bench: all
	scripts/deps.sh bench
	tests/bench/run.sh
	$(BUILD)/sendpath --mb 1024
	$(BUILD)/sendpath --mb 1024 --unix
	tests/bench/run.sh --timing

bench-timing: all
	scripts/deps.sh bench
	tests/bench/run.sh --timing

# ---- Fuzzing (tests/fuzz/) -------------------------------------------------
#
#   make fuzz [FUZZ_SECONDS=3600] [FUZZ_TARGETS="nbd image config acl"]
#
# libFuzzer targets built with clang (-fsanitize=fuzzer,address,undefined)
# into $(BUILD)/fuzz/: nbd (an in-process flashd on a unix socket; each input
# is one client's byte stream), image (damaged superblock, checkpoint, footer
# and log pages of a small image, opened read-only), config (flashd.conf
# parser) and acl (allow rules and common/parse.c).  FUZZ_SECONDS is split
# among the targets; findings land in $(BUILD)/fuzz/findings/TARGET/.
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 3600
FUZZ_TARGETS ?= nbd image config acl
# UBSan reports are recoverable so that tests/fuzz/known/ubsan.supp can
# suppress known ones; run.sh and regress.sh set halt_on_error=1
FUZZ_SAN     := -fsanitize=address,undefined -fno-omit-frame-pointer
FUZZ_CFLAGS  := -std=gnu11 -D_GNU_SOURCE -pthread -I. -O1 -g -Wall -Wno-unused-parameter $(FUZZ_SAN)
FUZZ_LIBS     = $(shell pkg-config --libs libevent_pthreads libevent_openssl libevent libsystemd inih openssl 2>/dev/null) -pthread -lm
FUZZ_LIB_OBJS    := $(LIB_SRCS:%.c=$(BUILD)/fuzz/obj/%.o)
FUZZ_SERVER_OBJS := $(SERVER_SRCS:%.c=$(BUILD)/fuzz/obj/%.o) $(BUILD)/fuzz/obj/gen/dashboard_files.o
FUZZ_BINS    := $(FUZZ_TARGETS:%=$(BUILD)/fuzz/fuzz_%)

.PHONY: fuzz fuzz-build
fuzz-build: $(FUZZ_BINS)

fuzz: fuzz-build
	tests/fuzz/run.sh $(FUZZ_SECONDS) $(FUZZ_TARGETS)

$(BUILD)/fuzz/deps-stamp: scripts/deps.sh
	@mkdir -p $(dir $@)
	scripts/deps.sh fuzz
	@touch $@

# library and server code, instrumented for coverage (fuzzer-no-link); the
# server's main() becomes flashd_main() for the in-process server
$(BUILD)/fuzz/obj/%.o: %.c $(BUILD)/fuzz/deps-stamp
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link $(if $(filter server/main.c,$<),-Dmain=flashd_main) \
		$(shell pkg-config --cflags libevent libsystemd inih openssl 2>/dev/null) -MMD -MP -c -o $@ $<

$(BUILD)/fuzz/obj/gen/dashboard_files.o: $(BUILD)/gen/dashboard_files.c $(BUILD)/fuzz/deps-stamp
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -c -o $@ $<

$(BUILD)/fuzz/obj/tests/fuzz/%.o: tests/fuzz/%.c $(BUILD)/fuzz/deps-stamp
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -MMD -MP -c -o $@ $<

$(BUILD)/fuzz/fuzz_nbd: $(BUILD)/fuzz/obj/tests/fuzz/fuzz_nbd.o $(FUZZ_SERVER_OBJS) $(FUZZ_LIB_OBJS)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -Wl,--wrap=log_msg -o $@ $^ $(FUZZ_LIBS)

$(BUILD)/fuzz/fuzz_config: $(BUILD)/fuzz/obj/tests/fuzz/fuzz_config.o $(FUZZ_SERVER_OBJS) $(FUZZ_LIB_OBJS)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -Wl,--wrap=log_msg -o $@ $^ $(FUZZ_LIBS)

$(BUILD)/fuzz/fuzz_acl $(BUILD)/fuzz/fuzz_image: $(BUILD)/fuzz/fuzz_%: $(BUILD)/fuzz/obj/tests/fuzz/fuzz_%.o $(FUZZ_LIB_OBJS)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $^ -pthread -lm

clean:
	rm -rf $(BUILD)

# ---- Installing -----------------------------------------------------------
#
#   make install [PREFIX=/usr/local] [DESTDIR=]
#
# PREFIX decides the programs, man pages, docs and the unit's directory; the
# tcmu-runner handler and the nbdkit plugin go where those programs look for
# them whatever PREFIX is, and the configuration is always
# /etc/flashd/flashd.conf (flashd's default path).  That file is installed
# only if $(DESTDIR)/etc/flashd/flashd.conf does not exist yet; uninstall
# removes it only while it is still the unmodified example.  The installed
# unit's ExecStart names $(SBINDIR)/flashd (deploy/flashd.service says
# /usr/sbin/flashd, the PREFIX=/usr layout).  Every directory is a variable.
PREFIX      ?= /usr/local
SBINDIR     ?= $(PREFIX)/sbin
BINDIR      ?= $(PREFIX)/bin
DATADIR     ?= $(PREFIX)/share
MANDIR      ?= $(DATADIR)/man
DOCDIR      ?= $(DATADIR)/doc/flashd
CONFDIR     ?= /etc/flashd
# /lib/systemd/system for PREFIX=/usr (Debian 12's systemdsystemunitdir),
# else PREFIX/lib/systemd/system (/usr/local/lib/systemd/system is in
# systemd's unit search path)
SYSTEMDUNITDIR ?= $(if $(filter /usr /usr/,$(PREFIX)),/lib/systemd/system,$(PREFIX)/lib/systemd/system)
MULTIARCH   ?= $(or $(shell $(CC) -print-multiarch 2>/dev/null),x86_64-linux-gnu)
# Debian's tcmu-runner 1.5.4 loads handler_*.so from here
TCMU_HANDLERDIR ?= /usr/lib/$(MULTIARCH)/tcmu-runner
# nbdkit --dump-config's plugindir: then "nbdkit flashd image=..." finds it
NBDKIT_PLUGINDIR ?= $(or $(shell nbdkit --dump-config 2>/dev/null | sed -n 's/^plugindir=//p'),/usr/lib/$(MULTIARCH)/nbdkit/plugins)

MAN_PAGES := flashd.8 flashctl.8 flashd.conf.5
ifneq ($(filter %/nbdkit-flashd-plugin.so,$(PROGS)),)
MAN_PAGES += nbdkit-flashd-plugin.1
endif
FLASHD_VERSION_STR = $(shell sed -n 's/^\#define FLASHD_VERSION "\(.*\)"/\1/p' server/version.h)

# man/*.in with the version filled in
$(BUILD)/man/%: man/%.in server/version.h
	@mkdir -p $(dir $@)
	sed 's/@VERSION@/$(FLASHD_VERSION_STR)/g' $< >$@

install: $(PROGS) $(MAN_PAGES:%=$(BUILD)/man/%)
	install -D -m 0755 $(BUILD)/flashd $(DESTDIR)$(SBINDIR)/flashd
	install -D -m 0755 $(BUILD)/flashctl $(DESTDIR)$(BINDIR)/flashctl
ifneq ($(filter %/handler_flashd.so,$(PROGS)),)
	install -D -m 0644 $(BUILD)/handler_flashd.so $(DESTDIR)$(TCMU_HANDLERDIR)/handler_flashd.so
endif
ifneq ($(filter %/nbdkit-flashd-plugin.so,$(PROGS)),)
	install -D -m 0644 $(BUILD)/nbdkit-flashd-plugin.so $(DESTDIR)$(NBDKIT_PLUGINDIR)/nbdkit-flashd-plugin.so
	install -D -m 0644 $(BUILD)/man/nbdkit-flashd-plugin.1 $(DESTDIR)$(MANDIR)/man1/nbdkit-flashd-plugin.1
endif
	@# the unit with ExecStart's path for this PREFIX (made here: it depends on
	@# SBINDIR), written straight into DESTDIR: install writes nothing in the
	@# tree, so installs into two DESTDIRs can run at once (test-drbd's nodes)
	install -d $(DESTDIR)$(SYSTEMDUNITDIR)
	sed 's|/usr/sbin/flashd|$(SBINDIR)/flashd|g' deploy/flashd.service \
		>$(DESTDIR)$(SYSTEMDUNITDIR)/flashd.service
	chmod 0644 $(DESTDIR)$(SYSTEMDUNITDIR)/flashd.service
	install -D -m 0644 $(BUILD)/man/flashd.8 $(DESTDIR)$(MANDIR)/man8/flashd.8
	install -D -m 0644 $(BUILD)/man/flashctl.8 $(DESTDIR)$(MANDIR)/man8/flashctl.8
	install -D -m 0644 $(BUILD)/man/flashd.conf.5 $(DESTDIR)$(MANDIR)/man5/flashd.conf.5
	install -D -m 0644 conf/flashd.conf $(DESTDIR)$(DOCDIR)/flashd.conf.example
	install -D -m 0644 README.md $(DESTDIR)$(DOCDIR)/README.md
	install -D -m 0644 -t $(DESTDIR)$(DOCDIR)/doc $(wildcard doc/*.md doc/*.png)
	install -D -m 0644 deploy/README.md $(DESTDIR)$(DOCDIR)/README.deploy.md
	install -D -m 0755 deploy/iscsi-lun.sh $(DESTDIR)$(DOCDIR)/examples/iscsi-lun.sh
	install -D -m 0644 -t $(DESTDIR)$(DOCDIR)/examples/prometheus deploy/prometheus/prometheus.yml \
		deploy/prometheus/flashd-alerts.yml deploy/prometheus/flashd-alerts.test.yml
	@if [ -e $(DESTDIR)$(CONFDIR)/flashd.conf ]; then \
		echo "$(DESTDIR)$(CONFDIR)/flashd.conf exists: kept (the example is $(DOCDIR)/flashd.conf.example)"; \
	else \
		echo "install -D -m 0644 conf/flashd.conf $(DESTDIR)$(CONFDIR)/flashd.conf"; \
		install -D -m 0644 conf/flashd.conf $(DESTDIR)$(CONFDIR)/flashd.conf; \
	fi

uninstall:
	rm -f $(DESTDIR)$(SBINDIR)/flashd $(DESTDIR)$(BINDIR)/flashctl
	rm -f $(DESTDIR)$(TCMU_HANDLERDIR)/handler_flashd.so
	rm -f $(DESTDIR)$(NBDKIT_PLUGINDIR)/nbdkit-flashd-plugin.so
	rm -f $(DESTDIR)$(MANDIR)/man1/nbdkit-flashd-plugin.1
	rm -f $(DESTDIR)$(SYSTEMDUNITDIR)/flashd.service
	rm -f $(DESTDIR)$(MANDIR)/man8/flashd.8 $(DESTDIR)$(MANDIR)/man8/flashctl.8 \
		$(DESTDIR)$(MANDIR)/man5/flashd.conf.5
	rm -f $(DESTDIR)$(DOCDIR)/flashd.conf.example $(DESTDIR)$(DOCDIR)/README.md \
		$(DESTDIR)$(DOCDIR)/README.deploy.md $(DESTDIR)$(DOCDIR)/examples/iscsi-lun.sh
	rm -f $(addprefix $(DESTDIR)$(DOCDIR)/,$(wildcard doc/*.md doc/*.png))
	rm -f $(DESTDIR)$(DOCDIR)/examples/prometheus/prometheus.yml \
		$(DESTDIR)$(DOCDIR)/examples/prometheus/flashd-alerts.yml \
		$(DESTDIR)$(DOCDIR)/examples/prometheus/flashd-alerts.test.yml
	rmdir $(DESTDIR)$(DOCDIR)/examples/prometheus $(DESTDIR)$(DOCDIR)/examples $(DESTDIR)$(DOCDIR)/doc $(DESTDIR)$(DOCDIR) 2>/dev/null || true
	@if [ -e $(DESTDIR)$(CONFDIR)/flashd.conf ]; then \
		if cmp -s conf/flashd.conf $(DESTDIR)$(CONFDIR)/flashd.conf; then \
			echo "rm -f $(DESTDIR)$(CONFDIR)/flashd.conf"; \
			rm -f $(DESTDIR)$(CONFDIR)/flashd.conf; \
			rmdir $(DESTDIR)$(CONFDIR) 2>/dev/null || true; \
		else \
			echo "$(DESTDIR)$(CONFDIR)/flashd.conf differs from the example: kept"; \
		fi; \
	fi

-include $(shell find $(BUILD)/obj $(BUILD)/san/obj $(BUILD)/fuzz/obj -name '*.d' 2>/dev/null)
