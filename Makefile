# sbx - privilege-separated sandbox service. `make run` runs it, `make check` tests it.

PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
LIBEXECDIR ?= $(PREFIX)/libexec/sbx
# systemd searches /usr/local/lib too, so the defaults work for PREFIX=/usr/local.
SYSTEMDUNITDIR ?= $(PREFIX)/lib/systemd/system
SYSUSERSDIR ?= $(PREFIX)/lib/sysusers.d
DESTDIR ?=
CC ?= cc
PYTHON ?= /usr/bin/python3

PKGS := libevent jansson sqlite3 libsodium nettle
# The kubernetes driver's TLS (adr/0072).
PKGS += libevent_openssl openssl
# libwslay (WebSocket framing, adr/0052): Debian's libwslay-dev ships no .pc file.
WSLAY_LIBS := -lwslay

WARN := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes
ifneq ($(CI),)
WARN += -Werror
endif

ifneq ($(FUZZ),)
# libFuzzer builds (tests/fuzz/, `make fuzz`): clang, every object with
# coverage feedback, ASan and UBSan; the targets link -fsanitize=fuzzer.
BUILD := build/fuzz
CC := clang
SANFLAGS := -fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer \
	-fno-sanitize-recover=undefined
OPT := -O1
else ifneq ($(SANITIZE),)
BUILD ?= build/san
SANFLAGS := -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=undefined
OPT := -O1
else
BUILD ?= build/out
SANFLAGS :=
OPT := -O2 -D_FORTIFY_SOURCE=2
endif

PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS = $(shell pkg-config --libs $(PKGS) 2>/dev/null) $(WSLAY_LIBS)

CFLAGS ?= -g
ALL_CFLAGS := -std=c11 -D_GNU_SOURCE $(OPT) $(CFLAGS) $(WARN) -fstack-protector-strong \
	$(SANFLAGS) -Icommon -Iproto -Ibroker -Iapi $(PKG_CFLAGS)
ALL_LDFLAGS := $(SANFLAGS) $(LDFLAGS)

COMMON_SRC := $(wildcard common/*.c proto/*.c)
BROKER_SRC := $(filter-out broker/broker.c,$(wildcard broker/*.c))
API_SRC := $(filter-out api/api.c,$(wildcard api/*.c))
CLI_SRC := $(wildcard api/cli/*.c)
HELPER_SRC := $(wildcard broker/helper/*.c)
# The egress proxy: its own files plus the policy grammar in common/
# (common/proxy_policy.c, shared with the api's and the broker's checks).
PROXY_SRC := $(wildcard broker/proxy/*.c) $(wildcard common/proxy_policy.c)
# Its request parser, also linked into the broker library for the tests.
PROXY_LIB_SRC := $(wildcard broker/proxy/proxy_req.c)
# The helper's share of proto/: libc-only codecs (protocol 2 frames; protocol 3, adr/0025).
HELPER_PROTO_SRC := $(wildcard proto/sbx_helper_frame.c proto/sbx_agent.c)
# The one clock (libc only) is linked into the static proxy too, and the
# vm egress link its vmrelay mode speaks (adr/0069, amendment "egress").
STATIC_COMMON_SRC := common/sbx_time.c common/sbx_vmux.c common/sbx_vmux_link.c
UNIT_SRC := $(wildcard tests/unit/test_*.c)
FAKE_SRC := $(wildcard tests/driver_fake*.c)
FUZZ_SRC := $(wildcard tests/fuzz/fuzz_*.c)

obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))

LIBSBX := $(BUILD)/libsbx.a
LIBBROKER := $(BUILD)/libsbxbroker.a
LIBAPI := $(BUILD)/libsbxapi.a

BINS := $(if $(wildcard broker/broker.c),$(BUILD)/sandbox-broker) $(if $(wildcard api/api.c),$(BUILD)/sandbox-api) \
	$(if $(CLI_SRC),$(BUILD)/sbxctl) $(if $(HELPER_SRC),$(BUILD)/sbx-helper) \
	$(if $(PROXY_SRC),$(BUILD)/sbx-proxy) \
	$(if $(wildcard broker/vm/sbx_vminit.c),$(BUILD)/sbx-vminit)
UNIT_BINS := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(UNIT_SRC)) \
	$(if $(wildcard tests/conform/conform.c),$(BUILD)/tests/test_conform)
FUZZ_BINS := $(patsubst tests/fuzz/%.c,$(BUILD)/fuzzers/%,$(FUZZ_SRC))

.PHONY: all check check-fast bench install uninstall clean deps unit sanitize run fuzz fuzzers fuzz-smoke
all: $(BINS)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -MMD -MP -c $< -o $@

$(LIBSBX): $(call obj,$(COMMON_SRC))
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(LIBBROKER): $(call obj,$(BROKER_SRC) $(PROXY_LIB_SRC))
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

# /console's terminal is xterm.js from npm (adr/0054), pinned by
# api/console/package-lock.json and installed by `npm ci` (no install
# scripts); nothing of it is in the tree. After that the build is offline.
CONSOLE_MODULES := api/console/node_modules/.package-lock.json
$(CONSOLE_MODULES): api/console/package.json api/console/package-lock.json
	@command -v npm >/dev/null 2>&1 || { echo "make: npm is missing: /console embeds xterm.js" \
		"from npm at build time (adr/0054); install Debian's npm (deploy/deps.sh)" >&2; exit 1; }
	cd api/console && npm ci --no-audit --no-fund --ignore-scripts
	@touch $@
# The page: api/console.html with xterm.js, its fit addon and xterm.css put
# in (api/console/embed.py), then a C array the api serves.
CONSOLE_PAGE := $(BUILD)/gen/console.html
$(CONSOLE_PAGE): api/console.html api/console/embed.py $(CONSOLE_MODULES)
	@mkdir -p $(dir $@)
	$(PYTHON) api/console/embed.py api/console.html api/console/node_modules $@
CONSOLE_GEN := $(BUILD)/gen/api_console_html.c
$(CONSOLE_GEN): $(CONSOLE_PAGE)
	@mkdir -p $(dir $@)
	{ echo '/* generated from api/console.html by the Makefile; do not edit */'; \
	  echo '#include <stddef.h>'; \
	  echo 'extern const unsigned char api_console_html[];'; \
	  echo 'extern const size_t api_console_html_len;'; \
	  echo 'const unsigned char api_console_html[] = {'; \
	  od -An -v -tx1 $< | sed 's/\([0-9a-f][0-9a-f]\)/0x\1,/g'; \
	  echo '0x00 };'; \
	  echo 'const size_t api_console_html_len = sizeof(api_console_html) - 1;'; \
	} > $@.tmp && mv $@.tmp $@
$(BUILD)/gen/api_console_html.o: $(CONSOLE_GEN)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

$(LIBAPI): $(call obj,$(API_SRC)) $(BUILD)/gen/api_console_html.o
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/sandbox-broker: $(call obj,broker/broker.c) $(LIBBROKER) $(LIBSBX)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(PKG_LIBS) -lm

$(BUILD)/sandbox-api: $(call obj,api/api.c) $(LIBAPI) $(LIBSBX)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(PKG_LIBS) -lm

# The CLI is sbxctl (ADR 0011: Docker ships a command named sbx).
$(BUILD)/sbxctl: $(call obj,$(CLI_SRC)) $(LIBSBX)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(PKG_LIBS) -lm

# The helper runs inside sandboxes whose image we do not control: static,
# no sanitizer runtime, no shared library.
# Its protocol header and frame codec live in proto/ (libc only), shared
# with the broker.
$(BUILD)/sbx-helper: $(HELPER_SRC) $(HELPER_PROTO_SRC) $(wildcard broker/helper/*.h) \
		proto/sbx_proto.h proto/sbx_helper_proto.h proto/sbx_agent.h
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -D_GNU_SOURCE -O2 -D_FORTIFY_SOURCE=2 $(CFLAGS) $(WARN) \
		-fstack-protector-strong -Iproto -static -o $@ $(HELPER_SRC) $(HELPER_PROTO_SRC)

# PID 1 of a vm-driver sandbox (adr/0069): static, libc only, packed into
# the VM's initramfs by deploy/vm/build.sh.
$(BUILD)/sbx-vminit: broker/vm/sbx_vminit.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -D_GNU_SOURCE -O2 -D_FORTIFY_SOURCE=2 $(CFLAGS) $(WARN) \
		-fstack-protector-strong -static -o $@ $<

# The egress proxy runs in a container of the sandbox's image (adr/0026):
# static like the helper, libevent linked in, glibc's NSS lookups replaced
# (proxy_nonss.c: evdns is its only resolver).
$(BUILD)/sbx-proxy: $(PROXY_SRC) $(wildcard broker/proxy/*.h) common/proxy_policy.h $(STATIC_COMMON_SRC) \
		common/sbx_vmux.h common/sbx_vmux_link.h
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -D_GNU_SOURCE -O2 -D_FORTIFY_SOURCE=2 $(CFLAGS) $(WARN) \
		-fstack-protector-strong -static -Icommon -Iproto -o $@ $(PROXY_SRC) $(STATIC_COMMON_SRC) \
		$(shell pkg-config --cflags libevent 2>/dev/null) -levent_extra -levent_core

# Helpers the unit tests share (a .c with a header, not statics).
TESTUTIL_SRC := $(wildcard tests/unit/api_testutil.c tests/unit/golden.c tests/unit/agent_rig.c)
$(BUILD)/tests/%: tests/unit/%.c $(call obj,$(FAKE_SRC) $(TESTUTIL_SRC)) $(LIBBROKER) $(LIBAPI) $(LIBSBX)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Itests -o $@ $^ $(ALL_LDFLAGS) $(PKG_LIBS) -lcmocka -lm

# The driver conformance suite (adr/0024): one binary, every driver.
$(BUILD)/tests/test_conform: tests/conform/conform.c tests/conform/conform.h $(call obj,$(FAKE_SRC)) $(LIBBROKER) $(LIBAPI) $(LIBSBX)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Itests -Itests/conform -o $@ $< $(filter %.o %.a,$^) $(ALL_LDFLAGS) $(PKG_LIBS) -lcmocka -lm

# The CLI is no library: its printer is linked into its unit test.
$(BUILD)/tests/test_cli_print: $(call obj,api/cli/cli_print.c)

unit: $(UNIT_BINS)

# libFuzzer targets (tests/fuzz/README.md). Some include the .c they fuzz to
# reach its static parser; the archive then supplies only the rest.
$(BUILD)/fuzzers/%: tests/fuzz/%.c $(wildcard tests/fuzz/*.h) $(call obj,$(FAKE_SRC)) $(LIBBROKER) $(LIBAPI) $(LIBSBX)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Itests -Itests/fuzz -Iapi/cli -fsanitize=fuzzer -o $@ \
		$< $(filter %.o,$^) $(filter %.a,$^) $(ALL_LDFLAGS) $(PKG_LIBS) -lm
# The client-side targets share the scripted reply server (not a fuzz_* target).
$(BUILD)/fuzzers/fuzz_broker_reply $(BUILD)/fuzzers/fuzz_engine_reply $(BUILD)/fuzzers/fuzz_http_client: $(call obj,tests/fuzz/reply_server.c)
$(BUILD)/fuzzers/fuzz_broker_reply $(BUILD)/fuzzers/fuzz_engine_reply: $(call obj,tests/fuzz/driver_checks.c)
# The CLI is no library: its reply parser's target links its other files.
$(BUILD)/fuzzers/fuzz_cli_reply: $(call obj,$(filter-out api/cli/cli.c,$(CLI_SRC))) api/cli/cli.c

fuzzers: $(FUZZ_BINS)

# Every fuzz target for FUZZ_SECONDS (default 60) each; prints a table of
# target, executions, corpus size, crashes (tests/fuzz/run.sh).
FUZZ_SECONDS ?= 60
fuzz: deps
	$(MAKE) FUZZ=1 fuzzers
	@FUZZ_SECONDS=$(FUZZ_SECONDS) sh tests/fuzz/run.sh campaign

deps:
	@sh deploy/deps.sh

# The browser test's driver (playwright-core, no browser download: it uses
# Debian's chromium), pinned by tests/e2e/package-lock.json.
E2E_MODULES := tests/e2e/node_modules/.package-lock.json
$(E2E_MODULES): tests/e2e/package.json tests/e2e/package-lock.json
	cd tests/e2e && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund

# The E2B compatibility scenario's client: npm `e2b` (issue 23), pinned by
# tests/e2b/package-lock.json; tests/integration/test_e2b.py and the bench's
# e2b rows run tests/e2b/*.mjs with it.
E2B_MODULES := tests/e2b/node_modules/.package-lock.json
$(E2B_MODULES): tests/e2b/package.json tests/e2b/package-lock.json
	@command -v npm >/dev/null 2>&1 || { echo "make: npm is missing: the E2B scenario runs the" \
		"npm e2b SDK (tests/e2b); install Debian's npm (deploy/deps.sh)" >&2; exit 1; }
	cd tests/e2b && npm ci --no-audit --no-fund --ignore-scripts

# The whole test suite: unit tests, the same under ASan+UBSan, the fuzz smoke,
# integration tests on real Docker and Podman started on private sockets. One
# summary line. Every build comes first, with both cores; the lanes of
# tests/run.sh then run on a machine that no compiler loads: a Podman exec
# into a just-replaced container was reset twice while the sanitizer and
# fuzz builds ran beside the integration lanes (adr/0039).
CHECK_JOBS ?= 2
check: deps $(E2E_MODULES) $(E2B_MODULES)
	$(MAKE) -j$(CHECK_JOBS) all unit
	$(MAKE) -j$(CHECK_JOBS) SANITIZE=address,undefined unit
	$(MAKE) -j$(CHECK_JOBS) FUZZ=1 fuzzers
	@MAKE="$(MAKE)" sh tests/run.sh

# The inner loop: unit tests, the same under ASan+UBSan (the fake driver's
# conformance suite among them) and the Docker integration suites; no fuzz
# smoke, no Podman, no suite that runs once.
check-fast: deps $(E2E_MODULES) $(E2B_MODULES)
	$(MAKE) -j$(CHECK_JOBS) all unit
	@MAKE="$(MAKE)" SBX_CHECK_BUILD=san SBX_RUNTIMES=docker SBX_FUZZ=0 \
		SBX_SKIP_ONCE=1 sh tests/run.sh

bench: deps all $(BUILD)/engine-raw $(BUILD)/wire-micro $(E2B_MODULES)
	@BUILD=$(BUILD) sh tests/bench/run.sh

# make run builds with every core and quietly (a newcomer's first screen is
# the demo, not 150 compiler lines); a warning still shows.
RUN_JOBS ?= $(shell nproc 2>/dev/null || echo 2)
run: deps
	@echo "==> building sbx (make -j$(RUN_JOBS) all)"
	@$(MAKE) -s --no-print-directory -j$(RUN_JOBS) all
	@sh deploy/run.sh

UNITS := $(wildcard deploy/systemd/*.service)

# Binaries, the helper, the systemd units (their /usr/local paths rewritten
# to BINDIR/LIBEXECDIR) and the sysusers.d file. No `sbx`: the CLI is sbxctl.
install: all
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBEXECDIR)
	install -m 0755 $(filter-out $(BUILD)/sbx-helper $(BUILD)/sbx-proxy $(BUILD)/sbx-vminit,$(BINS)) $(DESTDIR)$(BINDIR)/
	$(if $(HELPER_SRC),install -m 0755 $(BUILD)/sbx-helper $(DESTDIR)$(LIBEXECDIR)/)
	$(if $(PROXY_SRC),install -m 0755 $(BUILD)/sbx-proxy $(DESTDIR)$(LIBEXECDIR)/)
	$(if $(wildcard broker/vm/sbx_vminit.c),install -m 0755 $(BUILD)/sbx-vminit $(DESTDIR)$(LIBEXECDIR)/)
	install -m 0755 deploy/egress-firewall.sh $(DESTDIR)$(LIBEXECDIR)/
	install -d $(DESTDIR)$(SYSTEMDUNITDIR) $(DESTDIR)$(SYSUSERSDIR)
	for u in $(UNITS); do \
		sed -e 's|/usr/local/bin/|$(BINDIR)/|g' \
		    -e 's|/usr/local/libexec/sbx/|$(LIBEXECDIR)/|g' $$u \
		    > $(DESTDIR)$(SYSTEMDUNITDIR)/$${u##*/}.tmp && \
		chmod 0644 $(DESTDIR)$(SYSTEMDUNITDIR)/$${u##*/}.tmp && \
		mv -f $(DESTDIR)$(SYSTEMDUNITDIR)/$${u##*/}.tmp \
		    $(DESTDIR)$(SYSTEMDUNITDIR)/$${u##*/} || exit 1; \
	done
	install -m 0644 deploy/systemd/sysusers.d/sbx.conf $(DESTDIR)$(SYSUSERSDIR)/sbx.conf

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/sandbox-broker $(DESTDIR)$(BINDIR)/sandbox-api \
		$(DESTDIR)$(BINDIR)/sbxctl $(DESTDIR)$(LIBEXECDIR)/sbx-helper \
		$(DESTDIR)$(LIBEXECDIR)/sbx-proxy $(DESTDIR)$(LIBEXECDIR)/egress-firewall.sh \
		$(DESTDIR)$(LIBEXECDIR)/sbx-vminit \
		$(patsubst deploy/systemd/%,$(DESTDIR)$(SYSTEMDUNITDIR)/%,$(UNITS)) \
		$(DESTDIR)$(SYSUSERSDIR)/sbx.conf
	-rmdir $(DESTDIR)$(LIBEXECDIR)

clean:
	rm -rf build tests/out

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)

# Hand-driven tool for the engine driver against a real runtime (not in all).
$(BUILD)/engine-cli: tests/tools/engine_cli.c $(LIBBROKER) $(LIBSBX)
	$(CC) $(ALL_CFLAGS) -o $@ $^ $(ALL_LDFLAGS) $(PKG_LIBS) -lm

# The bench's in-process CPU of the exec output wire path (adr/0028).
$(BUILD)/wire-micro: tests/bench/wire_micro.c $(LIBSBX)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $^ $(ALL_LDFLAGS) $(PKG_LIBS) -lm

# The bench's raw Engine API baseline (no sbx code; tests/bench/run.sh).
$(BUILD)/engine-raw: tests/bench/engine_raw.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(ALL_LDFLAGS) $(PKG_LIBS) -lm
