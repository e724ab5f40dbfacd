# tpuflow — build, test and tooling. `make help` lists the targets.
#
# Sources are found by folder, so adding a file needs no Makefile edit:
#   <dir>/*.c          -> build/obj/<dir>/*.o, archived into build/libtpuflow.a
#   <dir>/*_avx2.c     -> compiled with -mavx2 -mfma (chosen at run time by the caller)
#   <dir>/*_avx512.c   -> compiled with AVX-512 F/BW/VL/BF16 (likewise)
#   cli/main.c         -> build/tpuflow
#   tests/test_*.c     -> build/tests/test_* (cmocka), run by tests/run.sh
#   bench/*.c          -> build/bench/* (make bench)

BUILD   ?= build
PREFIX  ?= /usr/local
CC      ?= cc

SRC_DIRS := common accel ml storage scheduler executors orchestrator web cli
PKGS     := sqlite3 libcurl yaml-0.1 libmicrohttpd jansson libcrypto zlib

PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)

WARN    := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
           -Wformat=2 -Wvla -Wno-format-nonliteral
# -ffp-contract=off: the MXU contract fixes the rounding of every multiply-add (docs/accel.md).
CFLAGS  ?= -O2 -g
ALL_CFLAGS = $(CFLAGS) -std=c11 -D_GNU_SOURCE -ffp-contract=off -fno-fast-math -pthread $(WARN) \
           -MMD -MP -I. $(PKG_CFLAGS) -DTF_VERSION=\"$(VERSION)\"
LDLIBS  := $(PKG_LIBS) -lm -pthread
VERSION := $(shell cat VERSION 2>/dev/null || echo 0.0.0)

LIB_SRCS  := $(filter-out cli/main.c,$(foreach d,$(SRC_DIRS),$(wildcard $(d)/*.c)))
LIB_OBJS  := $(LIB_SRCS:%.c=$(BUILD)/obj/%.o)
# migrations/*.sql are embedded in the binary as a generated C array (orchestrator/store.c).
MIGRATIONS := $(sort $(wildcard migrations/*.sql))
LIB_OBJS  += $(BUILD)/obj/gen/migrations.o
# web/ui/ (the dashboard) is bundled by esbuild and embedded as a generated C array (web/ui.c).
UI_SRCS   := $(wildcard web/ui/*)
LIB_OBJS  += $(BUILD)/obj/gen/ui.o
TEST_SRCS := $(wildcard tests/test_*.c)
TEST_BINS := $(TEST_SRCS:tests/%.c=$(BUILD)/tests/%)
TEST_HELPERS := $(filter-out $(TEST_SRCS),$(wildcard tests/*.c))
BENCH_SRCS := $(wildcard bench/*.c)
BENCH_BINS := $(BENCH_SRCS:bench/%.c=$(BUILD)/bench/%)

# Quiet by default: `make V=1` shows the full commands.
Q := $(if $(V),,@)

.PHONY: all deps demo test tests asan debug lint format check-deps install bench fuzz soak clean help

all: $(BUILD)/tpuflow

help:
	@echo "make            build $(BUILD)/tpuflow"
	@echo "make deps       install missing Debian packages (apt-get, as root)"
	@echo "make demo       deps + build + run pipelines/fashion-mnist.yaml end to end"
	@echo "make test       deps + build + every test (unit, integration with real servers)"
	@echo "make asan       the tests under AddressSanitizer + UndefinedBehaviorSanitizer"
	@echo "make debug      the tests at -O0 with the invariants (TF_ASSERT) checked"
	@echo "make bench      benchmarks against peers in the same run (see docs/benchmarks.md)"
	@echo "make lint / format / check-deps / install PREFIX=DIR / clean"

deps:
	@scripts/deps.sh build
	@scripts/deps.sh npm && scripts/deps.sh npm-ci

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(ALL_CFLAGS) -c $< -o $@

$(BUILD)/obj/%_avx2.o: %_avx2.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $< (avx2)")
	$(Q)$(CC) $(ALL_CFLAGS) -mavx2 -mfma -mf16c -c $< -o $@

AVX512_FLAGS := -mavx2 -mfma -mavx512f -mavx512bw -mavx512vl -mavx512bf16

$(BUILD)/obj/%_avx512.o: %_avx512.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $< (avx512)")
	$(Q)$(CC) $(ALL_CFLAGS) $(AVX512_FLAGS) -c $< -o $@

# The names of the files a generated file is made of, rewritten only when they change: a file
# deleted or renamed has no timestamp newer than the target, so without this list the
# target kept what the deleted file had (a migration replaced by another of the same number
# stayed embedded). `make` runs the recipe every time; the file's time moves only on a change.
$(BUILD)/gen/%.list: FORCE
	@mkdir -p $(dir $@)
	@printf '%s\n' $(LIST_$*) | cmp -s - $@ 2>/dev/null || printf '%s\n' $(LIST_$*) > $@
LIST_migrations := $(MIGRATIONS)
LIST_ui         := $(UI_SRCS)
LIST_lib        := $(LIB_OBJS)

.PHONY: FORCE
FORCE:

$(BUILD)/gen/migrations.c: $(MIGRATIONS) $(BUILD)/gen/migrations.list scripts/embed-sql.sh
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  GEN     $@")
	$(Q)scripts/embed-sql.sh $(MIGRATIONS) > $@

$(BUILD)/obj/gen/migrations.o: $(BUILD)/gen/migrations.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(ALL_CFLAGS) -Wno-overlength-strings -c $< -o $@

$(BUILD)/gen/ui.c: $(UI_SRCS) $(BUILD)/gen/ui.list scripts/embed-ui.sh package-lock.json
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  GEN     $@ (esbuild)")
	$(Q)scripts/embed-ui.sh $(BUILD)/ui > $@.tmp && mv $@.tmp $@

$(BUILD)/obj/gen/ui.o: $(BUILD)/gen/ui.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(ALL_CFLAGS) -c $< -o $@

$(BUILD)/libtpuflow.a: $(LIB_OBJS) $(BUILD)/gen/lib.list
	@rm -f $@
	$(Q)ar rcs $@ $(LIB_OBJS)

$(BUILD)/tpuflow: $(BUILD)/obj/cli/main.o $(BUILD)/libtpuflow.a
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/tests/%: tests/%.c $(TEST_HELPERS) $(BUILD)/libtpuflow.a
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(ALL_CFLAGS) -Wno-missing-prototypes $(LDFLAGS) -o $@ $< $(TEST_HELPERS) $(BUILD)/libtpuflow.a $(LDLIBS) -lcmocka

$(BUILD)/bench/%: bench/%.c $(BUILD)/libtpuflow.a
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(ALL_CFLAGS) -Wno-missing-prototypes $(LDFLAGS) -o $@ $< $(BUILD)/libtpuflow.a $(LDLIBS) $(BENCH_LIBS)

tests: $(BUILD)/tpuflow $(TEST_BINS)

demo: deps
	@$(MAKE) --no-print-directory all
	@scripts/demo.sh $(BUILD)

test: deps
	@$(MAKE) --no-print-directory tests
	@scripts/deps.sh test
	@BUILD=$(BUILD) tests/run.sh

asan:
	@scripts/deps.sh build
	@$(MAKE) --no-print-directory BUILD=build-asan \
	  CFLAGS="-O1 -g -DTF_DEBUG -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" \
	  LDFLAGS="-fsanitize=address,undefined" tests
	@BUILD=build-asan TF_ASAN=1 tests/run.sh

# The tests with the invariants checked (TF_ASSERT, common/common.h) and no optimisation.
debug:
	@$(MAKE) --no-print-directory BUILD=build-debug CFLAGS="-O0 -g -DTF_DEBUG" tests
	@BUILD=build-debug tests/run.sh

bench: BENCH_LIBS = -lopenblas
bench: deps
	@scripts/deps.sh bench
	@$(MAKE) --no-print-directory all
	@$(MAKE) --no-print-directory BENCH_LIBS=-lopenblas $(BENCH_BINS)
	@BUILD=$(BUILD) scripts/bench.sh

# libFuzzer targets (fuzz/fuzz_*.c) against an ASan+UBSan build of the library, built with
# clang; FUZZ_RUNS executions each (default 10^6).
FUZZ_SRCS := $(wildcard fuzz/fuzz_*.c)
FUZZ_SAN  := -fsanitize=address,undefined -fno-sanitize-recover=undefined
fuzz: deps
	@$(MAKE) --no-print-directory all
	@$(MAKE) --no-print-directory BUILD=build-fuzz CC=clang WARN=-Wall \
	  CFLAGS="-O1 -g -fsanitize=fuzzer-no-link $(FUZZ_SAN)" build-fuzz/libtpuflow.a
	@for f in $(FUZZ_SRCS); do \
	  echo "  FUZZ $$f"; \
	  clang -O1 -g -std=c11 -D_GNU_SOURCE -I. $(PKG_CFLAGS) -fsanitize=fuzzer $(FUZZ_SAN) \
	    $$f build-fuzz/libtpuflow.a $(LDLIBS) -o build-fuzz/$$(basename $$f .c) || exit 1; \
	done
	@BUILD=build-fuzz scripts/fuzz.sh

soak: deps
	@$(MAKE) --no-print-directory all
	@scripts/deps.sh test
	@BUILD=$(BUILD) scripts/soak.sh

lint:
	cppcheck --quiet --error-exitcode=1 --enable=warning,portability --inline-suppr \
	  --suppress=missingIncludeSystem --suppress=unknownMacro -I. $(SRC_DIRS) tests
	clang-tidy --quiet $(filter-out %_avx2.c %_avx512.c,$(LIB_SRCS)) cli/main.c -- $(filter-out -MMD -MP -Werror,$(ALL_CFLAGS))
	clang-tidy --quiet $(filter %_avx2.c,$(LIB_SRCS)) -- $(filter-out -MMD -MP -Werror,$(ALL_CFLAGS)) -mavx2 -mfma -mf16c
	clang-tidy --quiet $(filter %_avx512.c,$(LIB_SRCS)) -- $(filter-out -MMD -MP -Werror,$(ALL_CFLAGS)) $(AVX512_FLAGS)

format:
	clang-format -i $(foreach d,$(SRC_DIRS) tests bench,$(wildcard $(d)/*.[ch]))

check-deps:
	@scripts/check-deps.sh

install: $(BUILD)/tpuflow
	install -D -m 0755 $(BUILD)/tpuflow $(DESTDIR)$(PREFIX)/bin/tpuflow
	install -d $(DESTDIR)$(PREFIX)/share/tpuflow/pipelines
	install -m 0644 pipelines/*.yaml $(DESTDIR)$(PREFIX)/share/tpuflow/pipelines/
	install -d $(DESTDIR)$(PREFIX)/share/tpuflow/pipelines/data
	install -m 0644 pipelines/data/*.csv $(DESTDIR)$(PREFIX)/share/tpuflow/pipelines/data/

clean:
	rm -rf build build-asan build-debug build-fuzz

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
