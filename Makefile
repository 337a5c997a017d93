# flashd - userspace FTL and network export for host-based flash cards.
#
#   make            build everything into build/
#   make run        build, then serve the embedded default (simulated ioDrive Duo)
#   make check      build and run every test; ends with "N passed, N failed"
#   make bench      benchmark flashd against nbdkit and qemu-nbd (not part of check)
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

FLASHCTL_SRCS := $(wildcard server/flashctl*.c)
FLASHCTL_OBJS := $(FLASHCTL_SRCS:%.c=$(BUILD)/obj/%.o)
SERVER_SRCS := $(filter-out $(FLASHCTL_SRCS),$(wildcard server/*.c))
SERVER_OBJS := $(SERVER_SRCS:%.c=$(BUILD)/obj/%.o)

UNIT_SRCS := $(wildcard tests/unit/t_*.c)
UNIT_BINS := $(UNIT_SRCS:tests/unit/%.c=$(BUILD)/tests/%)

# The unit tests again, built with AddressSanitizer and UBSan (any report
# fails the test): t_NAME-san.  The model test runs fewer operations there.
SAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
SAN_LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/san/obj/%.o)
SAN_LIB  := $(BUILD)/san/libflashd.a
SAN_BINS := $(UNIT_SRCS:tests/unit/%.c=$(BUILD)/tests/%-san)

PROGS := $(BUILD)/flashctl
ifneq ($(SERVER_SRCS),)
PROGS += $(BUILD)/flashd
endif
ifneq ($(wildcard plugins/nbdkit/*.c),)
PROGS += $(BUILD)/nbdkit-flashd-plugin.so
endif
ifneq ($(wildcard plugins/tcmu/*.c),)
PROGS += $(BUILD)/handler_flashd.so
endif

.PHONY: all run check bench deps clean
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

$(BUILD)/flashd: $(SERVER_OBJS) $(LIB)
	$(CC) $(CPPFLAGS_ALL) -o $@ $^ $(shell pkg-config --libs libevent_pthreads libevent_openssl libevent libsystemd inih openssl) $(LDLIBS_ALL)

$(BUILD)/nbdkit-flashd-plugin.so: $(wildcard plugins/nbdkit/*.c) $(LIB) $(DEPS_STAMP)
	$(CC) $(CPPFLAGS_ALL) -shared -o $@ $(wildcard plugins/nbdkit/*.c) $(LIB) $(LDLIBS_ALL)

$(BUILD)/handler_flashd.so: $(wildcard plugins/tcmu/*.c) $(DEPS_STAMP)
	$(CC) $(CPPFLAGS_ALL) $(shell pkg-config --cflags libnbd) -shared -o $@ $(wildcard plugins/tcmu/*.c) $(shell pkg-config --libs libnbd) $(LDLIBS_ALL)

$(BUILD)/tests/%: $(BUILD)/obj/tests/unit/%.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS_ALL) -o $@ $^ $(LDLIBS_ALL) $(LDLIBS_TEST)

# this test makes allocations fail: malloc and aligned_alloc are wrapped
$(BUILD)/tests/t_ftl_review $(BUILD)/tests/t_ftl_review-san: LDLIBS_TEST := -Wl,--wrap=malloc,--wrap=aligned_alloc

$(BUILD)/san/obj/%.o: %.c $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS_ALL) $(SAN_FLAGS) -DT_MODEL_DEFAULT_OPS=60000 -MMD -MP -c -o $@ $<

$(SAN_LIB): $(SAN_LIB_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/tests/%-san: $(BUILD)/san/obj/tests/unit/%.o $(SAN_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS_ALL) $(SAN_FLAGS) -o $@ $^ $(LDLIBS_ALL) $(LDLIBS_TEST)

run: all
	scripts/deps.sh check
	$(BUILD)/flashd --foreground

check: all
	scripts/deps.sh check
	tests/run.sh

bench: all
	scripts/deps.sh bench
	tests/bench/run.sh

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD)/obj $(BUILD)/san/obj -name '*.d' 2>/dev/null)
