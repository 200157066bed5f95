# The stock service: build, test, run.
#
#   make            build the service and the benchmarks into build/
#   make test       install what is missing, build with sanitizers, run every test
#   make test-tsan  the lock's tests and the stack under ThreadSanitizer (make test runs it too)
#   make demo       install what is missing, bring the local stack up, run the load report
#                   (WITH_ETCD=1 make demo: with etcd too, and the report's etcd row;
#                   WITH_ZOOKEEPER=1: with ZooKeeper too, and the zookeeper row)
#   make ladder     each lock design's flaw provoked on a stack of its own (loadtest/ladder),
#                   each row drawn again into docs/course/timelines/
#   make docs-check the course checked against the code (make docs: refresh its quotes)
#   make chaos      every fault against the safe modes under load, on three stacks of its own
#   make soak       every safe mode in turn under faults at random moments for 10 minutes
#                   (SOAK_MINUTES, SEED to replay), on a stack of its own; docs/lab/soak.md
#   make scale      the scaling report (loadtest/scale --check): hot goods, replicas 1-6,
#                   where the time goes, on a stack of its own (~5 min)
#   make up / down  start / stop the native local stack (PostgreSQL, Redis, 3 replicas, nginx)
#                   (`make down` stops the lab's stack too)
#   make lab        the lab: a stack of its own (FAULTS=on, short leases) and its page, where
#                   a learner steps real requests through a rung; http://127.0.0.1:8090/lab/
#   make lab-down   stop it
#   make test-fresh the README's two commands in new bookworm-slim containers (~6 min)
#   make clean      remove build/ (make down first: .run/ holds the database)
#
# Objects go under $(B) (build/ by default). The sanitizer build used by the tests lives in
# build/san and is made by calling this Makefile again with B=build/san SAN=1; the
# ThreadSanitizer build (make test-tsan) in build/tsan, with B=build/tsan TSAN=1.

CC ?= cc
B ?= build
SAN ?= 0
TSAN ?= 0

PKGS := libmicrohttpd libpq hiredis jansson
WARN := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
        -Wcast-qual -Wwrite-strings -Wpointer-arith -Wformat=2 -Wvla
# pkg-config is asked once, when make reads this file. On a bare machine that is before
# `deps` installed pkg-config and the -dev packages, so the targets that run `deps` (test,
# demo, up...) build through a second make, which reads this file again afterwards; a
# compile that finds the packages missing stops at once, saying what to run (pkg-check).
PKG_OK := $(shell pkg-config --exists $(PKGS) 2>/dev/null && echo yes)
CFLAGS := -std=gnu11 -O2 -g $(WARN) -D_GNU_SOURCE -I. -MMD -MP \
          $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
LDLIBS := $(shell pkg-config --libs $(PKGS) 2>/dev/null) -lpthread -lm
# The etcd lock (lock/etcd/) speaks etcd's JSON gateway over libcurl.
LDLIBS += -lcurl
# The ZooKeeper lock (lock/zookeeper/) uses ZooKeeper's multi-threaded C client, which has
# no pkg-config file.
LDLIBS += -lzookeeper_mt
TEST_LDLIBS := -lcmocka

ifeq ($(SAN),1)
CFLAGS += -O1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
LDFLAGS += -fsanitize=address,undefined
endif
# ThreadSanitizer: data races between the threads of one process (the lock's watchdog and
# subscriber, the replica's request threads). It cannot be combined with AddressSanitizer,
# hence a build of its own.
ifeq ($(TSAN),1)
ifeq ($(SAN),1)
$(error TSAN=1 and SAN=1 cannot be combined: ThreadSanitizer and AddressSanitizer exclude each other)
endif
CFLAGS += -O1 -fsanitize=thread -fno-omit-frame-pointer
LDFLAGS += -fsanitize=thread
endif

LOCK_SRC := $(wildcard lock/*.c lock/queue/*.c lock/etcd/*.c lock/zookeeper/*.c)
DB_SRC := $(wildcard db/*.c)
SERVICE_SRC := $(filter-out service/main.c,$(wildcard service/*.c service/*/*.c service/guards/modes/*.c))
TEST_SRC := $(wildcard tests/test_*.c)
TEST_SUPPORT_SRC := $(wildcard tests/support/*.c)
# The stack's test programs (tests/stack/test_*.c, one per concern, run against one running
# stack by tests/integration.sh) and the support library they share (tests/stack/*.c).
STACK_TEST_SRC := $(wildcard tests/stack/test_*.c)
STACK_SUPPORT_SRC := $(filter-out $(STACK_TEST_SRC),$(wildcard tests/stack/*.c))
# The programs that need a server, one per concern, each linked with the support library of
# its folder: the db/ module against PostgreSQL (tests/db/), the read-check-write with
# exactly ordered lock holders against PostgreSQL (tests/deduct/), the Redis lock (tests/lock/).
DB_TEST_SRC := $(wildcard tests/db/test_*.c)
DB_SUPPORT_SRC := $(filter-out $(DB_TEST_SRC),$(wildcard tests/db/*.c))
DEDUCT_TEST_SRC := $(wildcard tests/deduct/test_*.c)
DEDUCT_SUPPORT_SRC := $(filter-out $(DEDUCT_TEST_SRC),$(wildcard tests/deduct/*.c))
LOCK_TEST_SRC := $(wildcard tests/lock/test_*.c)
LOCK_SUPPORT_SRC := $(filter-out $(LOCK_TEST_SRC),$(wildcard tests/lock/*.c))
# The history checker (history/, docs/history.md): pure C and jansson, no other module.
HISTORY_SRC := $(filter-out history/main.c,$(wildcard history/*.c))

obj = $(patsubst %.c,$(B)/obj/%.o,$(1))
LOCK_OBJ := $(call obj,$(LOCK_SRC))
DB_OBJ := $(call obj,$(DB_SRC))
SERVICE_OBJ := $(call obj,$(SERVICE_SRC))
MODULE_OBJ := $(SERVICE_OBJ) $(DB_OBJ) $(LOCK_OBJ)
TEST_SUPPORT_OBJ := $(call obj,$(TEST_SUPPORT_SRC))
STACK_SUPPORT_OBJ := $(call obj,$(STACK_SUPPORT_SRC))
DB_SUPPORT_OBJ := $(call obj,$(DB_SUPPORT_SRC))
DEDUCT_SUPPORT_OBJ := $(call obj,$(DEDUCT_SUPPORT_SRC))
LOCK_SUPPORT_OBJ := $(call obj,$(LOCK_SUPPORT_SRC))
HISTORY_OBJ := $(call obj,$(HISTORY_SRC))

PROGRAMS := $(B)/stockd $(B)/lock-bench $(B)/ceiling-bench $(B)/check-history \
            $(B)/history-clock $(B)/fault-relay $(B)/libclock-shift.so $(B)/split-vote
TESTS := $(patsubst tests/%.c,$(B)/tests/%,$(TEST_SRC))
STACK_TESTS := $(patsubst tests/%.c,$(B)/tests/%,$(STACK_TEST_SRC))
DB_TESTS := $(patsubst tests/%.c,$(B)/tests/%,$(DB_TEST_SRC))
DEDUCT_TESTS := $(patsubst tests/%.c,$(B)/tests/%,$(DEDUCT_TEST_SRC))
LOCK_TESTS := $(patsubst tests/%.c,$(B)/tests/%,$(LOCK_TEST_SRC))
# What tests/tsan.sh runs: the service, and the tests with threads of their own to race
# (TSAN_SERVICE_TARGETS: what `make test` runs under TSan, its stack driven by the ASan build
# of tests/stack/); `make test-tsan` drives the stack with TSan builds of tests/stack/ too.
# check-history: the stack programs judge each load's history with their own build's.
TSAN_SERVICE_TARGETS := build/tsan/stockd build/tsan/tests/test_redlock \
                $(patsubst tests/%.c,build/tsan/tests/%,$(LOCK_TEST_SRC)) \
                build/tsan/tests/test_lab \
                build/tsan/tests/test_local \
                build/tsan/tests/test_etcd \
                build/tsan/tests/test_zookeeper \
                build/tsan/tests/test_sentinel \
                build/tsan/tests/test_cluster
TSAN_TARGETS := $(TSAN_SERVICE_TARGETS) \
                $(patsubst tests/%.c,build/tsan/tests/%,$(STACK_TEST_SRC)) \
                build/tsan/check-history

.PHONY: all programs tests test test-build-release test-build-san test-build-tsan test-unit test-integration test-tsan test-docker test-docker-pg-ha test-fresh demo ladder chaos chaos-pg soak scale \
        up down lab lab-down test-lab clean deps pkg-check check-includes config-doc docs docs-check

all: programs
programs: $(PROGRAMS)
# check-history too: tests/histories/run.sh (a unit suite) runs it on every committed history.
tests: $(TESTS) $(STACK_TESTS) $(DB_TESTS) $(DEDUCT_TESTS) $(LOCK_TESTS) $(B)/check-history $(B)/history-gen
# Named here, the folders' support objects are files that "ought to exist" for make: without
# this, a test program whose support object is missing while the modules' objects are built
# (a support file renamed, say) would match the generic $(B)/tests/% rule before its folder's.
$(TESTS) $(STACK_TESTS) $(DB_TESTS) $(DEDUCT_TESTS) $(LOCK_TESTS): | $(STACK_SUPPORT_OBJ) \
	$(DB_SUPPORT_OBJ) $(DEDUCT_SUPPORT_OBJ) $(LOCK_SUPPORT_OBJ)

# pkg-check and check-includes are order-only: they run before the first compile but never
# make an object stale.
$(B)/obj/%.o: %.c | pkg-check check-includes
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<

# The Lua scripts are embedded with .incbin (see lock/scripts.c): rebuild when they change.
$(B)/obj/lock/scripts.o: $(wildcard lock/*.lua)

$(B)/stockd: $(B)/obj/service/main.o $(MODULE_OBJ)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(B)/lock-bench: $(B)/obj/bench/lock_bench.o $(B)/obj/bench/clock.o $(LOCK_OBJ)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(B)/split-vote: $(B)/obj/bench/split_vote.o $(B)/obj/bench/clock.o $(LOCK_OBJ)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(B)/ceiling-bench: $(B)/obj/bench/ceiling_bench.o $(B)/obj/bench/clock.o $(SERVICE_OBJ) $(DB_OBJ) $(LOCK_OBJ)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(B)/check-history: $(B)/obj/history/main.o $(HISTORY_OBJ)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# A realistic load history, legal or not, for check-history's tests and measurements.
$(B)/history-gen: $(B)/obj/tests/histories/generate.o
	$(CC) $(LDFLAGS) -o $@ $^

# The shell steps of a history (loadtest/lib/history.sh) read the monotonic clock with it.
$(B)/history-clock: $(B)/obj/loadtest/lib/history_clock.o
	$(CC) $(LDFLAGS) -o $@ $^

# The fault relay (tests/support/relay.h) as a program, for the chaos rows, the soak and the
# ladder's partitions: replies lost on purpose between a replica and Redis.
$(B)/fault-relay: $(B)/obj/loadtest/lib/fault_relay.o $(B)/obj/tests/support/relay.o \
		$(B)/obj/tests/support/ports.o
	$(CC) $(LDFLAGS) -o $@ $^ -lpthread

# The ladder's clock jump (loadtest/lib/clock_shift.c): preloaded into a redis-server, so
# built without the sanitizers of the build it is part of (WARN and -D_GNU_SOURCE only).
$(B)/libclock-shift.so: loadtest/lib/clock_shift.c
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 -O2 $(WARN) -D_GNU_SOURCE -fPIC -shared -o $@ $<

# Not in `programs`: it links libcurl, whose headers come with the test packages.
$(B)/chaos-load: $(B)/obj/bench/chaos_load.o $(B)/obj/bench/clock.o
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) -lcurl

# The stack's programs talk to the stack over HTTP, redis-cli and libpq: none of the modules.
# (GNU make takes the pattern rule with the shortest stem: this one for tests/stack/.)
$(B)/tests/stack/%: $(B)/obj/tests/stack/%.o $(STACK_SUPPORT_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(TEST_LDLIBS)

$(B)/tests/db/%: $(B)/obj/tests/db/%.o $(DB_SUPPORT_OBJ) $(TEST_SUPPORT_OBJ) $(MODULE_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(TEST_LDLIBS)

$(B)/tests/deduct/%: $(B)/obj/tests/deduct/%.o $(DEDUCT_SUPPORT_OBJ) $(TEST_SUPPORT_OBJ) $(MODULE_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(TEST_LDLIBS)

$(B)/tests/lock/%: $(B)/obj/tests/lock/%.o $(LOCK_SUPPORT_OBJ) $(TEST_SUPPORT_OBJ) $(MODULE_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(TEST_LDLIBS)

$(B)/tests/test_history: $(B)/obj/tests/test_history.o $(HISTORY_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(TEST_LDLIBS)

$(B)/tests/%: $(B)/obj/tests/%.o $(TEST_SUPPORT_OBJ) $(MODULE_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(TEST_LDLIBS)

deps:
	@scripts/deps.sh ensure

# docs/configuration.md: every setting, as the code's own table prints it (test_config fails
# when the file and the code disagree). Run after adding or changing a setting.
config-doc: $(B)/stockd
	@{ echo '# Configuration'; echo; \
	   echo '`stockd` reads its settings from the environment. This table is printed by'; \
	   echo '`build/stockd --help-markdown` from the table the code uses (`service/config.c`),'; \
	   echo 'and pasted here by `make config-doc`; `build/stockd --help` prints the same for a'; \
	   echo 'terminal. A bad value stops the start-up with one line naming the variable, the rule'; \
	   echo 'and the value.'; echo; $(B)/stockd --help-markdown; } > docs/configuration.md
	@echo "docs/configuration.md written"

# The course (docs/course/) checked against the code: every file and function a chapter
# names exists, every mode has a chapter, every quote is the source's text, every link leads
# somewhere (scripts/docs.sh; make test runs it). `make docs` refreshes the quotes after a
# change to the quoted code.
docs-check:
	@scripts/docs.sh --check

docs:
	@scripts/docs.sh --write

# The module boundaries (CONTRIBUTING.md): service/ includes only the public headers of lock/
# and db/, and neither of those includes the other.
check-includes:
	@scripts/check-includes.sh

pkg-check:
ifneq ($(PKG_OK),yes)
	@echo "make: pkg-config does not find $(PKGS) (or pkg-config itself):" \
	      "run 'make deps' (or any of make test / demo / up, which run it), then make again" >&2
	@exit 1
endif

# The tests build three times: the release build (so -O2 warnings are errors too), the
# sanitizer build they run, and the ThreadSanitizer build of what tests/tsan.sh runs; the three
# side by side, with one job per core.
TEST_JOBS ?= $(shell nproc 2>/dev/null || echo 2)

test: deps
	@scripts/deps.sh ensure browser etcd zookeeper pg-ha
	$(MAKE) -j$(TEST_JOBS) test-build-release test-build-san test-build-tsan
	TSAN_BUILD=build/tsan tests/run-all.sh build/san

test-build-release:
	$(MAKE) all
test-build-san:
	$(MAKE) B=build/san SAN=1 programs tests
test-build-tsan:
	$(MAKE) B=build/tsan TSAN=1 $(TSAN_SERVICE_TARGETS)

test-unit: deps
	$(MAKE) B=build/san SAN=1 tests
	tests/run-unit.sh build/san

test-integration: deps
	@scripts/deps.sh ensure browser
	$(MAKE) B=build/san SAN=1 programs tests
	tests/integration.sh build/san

# The lab's tests alone (tests/lab.sh: its stack, the API, the page in Chromium).
test-lab: deps
	@scripts/deps.sh ensure browser
	$(MAKE) B=build/san SAN=1 programs tests
	tests/run-lab.sh build/san

test-tsan: deps
	$(MAKE) B=build/tsan TSAN=1 $(TSAN_TARGETS)
	tests/tsan.sh build/tsan

test-docker:
	docker/test.sh

# The compose profile pg-ha (PostgreSQL under Patroni): up, a sale, the leader's container
# killed, a sale again, the node rejoined. Minutes, so not part of test-docker.
test-docker-pg-ha:
	docker/test-pg-ha.sh

# Not part of `make test`: it installs every package twice, in containers (docker/fresh.sh).
test-fresh:
	docker/fresh.sh

# Not `demo: deps all`: `all` would build with the flags this make computed before `deps`
# ran (and, under -j, while it runs).
# The etcd group only with WITH_ETCD=1: the stack runs etcd then (scripts/stack.sh).
ETCD_DEPS := $(if $(filter 1,$(WITH_ETCD)),scripts/deps.sh ensure etcd,@true)
# The zookeeper group only with WITH_ZOOKEEPER=1, likewise.
ZK_DEPS := $(if $(filter 1,$(WITH_ZOOKEEPER)),scripts/deps.sh ensure zookeeper,@true)
# The pg-ha group (Patroni) only with PG_HA=1, likewise.
PGHA_DEPS := $(if $(filter 1,$(PG_HA)),scripts/deps.sh ensure pg-ha,@true)

demo: deps
	$(ETCD_DEPS)
	$(ZK_DEPS)
	$(PGHA_DEPS)
	$(MAKE) all
	scripts/stack.sh up
	loadtest/run

# Starts a stack of its own (FAULTS=on, short leases) on other ports, and stops it after.
ladder: deps
	$(MAKE) all
	loadtest/ladder --timelines docs/course/timelines

# The same, with load: a fault at a fixed moment of a bounded load, per (fault, mode).
chaos: deps
	@scripts/deps.sh ensure test etcd chaos
	$(MAKE) all $(B)/chaos-load $(B)/fault-relay
	loadtest/chaos

# The soak (loadtest/soak --record): the safe modes in turn, each under a nemesis that mixes
# the faults at random moments (seeded; SEED=S replays a schedule), its table added to
# docs/lab/soak.md. etcd and ZooKeeper are soaked when installed (make test installs them).
# Not in `make test`: it lasts SOAK_MINUTES (10), its stack's start and the judging aside.
soak: deps
	@scripts/deps.sh ensure test
	$(MAKE) all $(B)/chaos-load $(B)/fault-relay
	loadtest/soak --record --minutes $(or $(SOAK_MINUTES),10) $(if $(SEED),--seed $(SEED))

# PostgreSQL under Patroni, its primary killed mid-load, synchronous then asynchronous
# replication (loadtest/chaos-pg); a stack of its own, stopped after. Not in `make test`.
chaos-pg: deps
	@scripts/deps.sh ensure test pg-ha
	$(MAKE) all
	loadtest/chaos-pg

# Starts a stack of its own (replicas restarted for each count), stops it after; exits 1
# when a safe mode oversold or a row failed.
scale: deps
	$(MAKE) all
	loadtest/scale --check

up: deps
	$(ETCD_DEPS)
	$(ZK_DEPS)
	$(PGHA_DEPS)
	$(MAKE) all
	scripts/stack.sh up

down:
	scripts/stack.sh down
	scripts/lab.sh down

# The lab's stack (scripts/lab.sh: its own run directory and ports) stays up until lab-down.
lab: deps
	$(MAKE) all
	scripts/lab.sh up

lab-down:
	scripts/lab.sh down

clean:
	rm -rf build

# Keep intermediate objects (tests/support) so a relink does not rebuild them.
.SECONDARY:

-include $(shell find $(B) -name '*.d' 2>/dev/null)
