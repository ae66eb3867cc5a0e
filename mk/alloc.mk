# crates/alloc: the C library, its pkg-config file, and the C-side test.
ALLOC_BUILD := build/alloc
ALLOC_PC := $(ALLOC_BUILD)/pkgconfig/huddle-alloc.pc
ALLOC_VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
PREFIX ?= /usr/local

BUILD_STEPS += build-alloc-c
TEST_STEPS += test-alloc-c

.PHONY: build-alloc-c test-alloc-c install-alloc

# The .pc of the build tree points at target/release and include/ (rpath included).
build-alloc-c:
	$(CARGO) build --release -p huddle-alloc
	@mkdir -p $(ALLOC_BUILD)/pkgconfig
	sed -e 's|@PREFIX@|$(abspath .)|' -e 's|@INCLUDEDIR@|$(abspath include)|' \
	    -e 's|@LIBDIR@|$(abspath target/release)|' -e 's|@VERSION@|$(ALLOC_VERSION)|' \
	    crates/alloc/huddle-alloc.pc.in > $(ALLOC_PC)

test-alloc-c: build-alloc-c
	cc -O2 -Wall -Wextra -Werror crates/alloc/c/test_alloc.c -o $(ALLOC_BUILD)/test_alloc \
	    $$(PKG_CONFIG_PATH=$(abspath $(ALLOC_BUILD))/pkgconfig pkg-config --cflags --libs huddle-alloc) -lpthread
	$(ALLOC_BUILD)/test_alloc
	@if [ "$$(id -u)" = 0 ] && command -v setpriv >/dev/null; then \
	    setpriv --reuid=65534 --regid=65534 --clear-groups $(ALLOC_BUILD)/test_alloc --unprivileged; fi

install-alloc: build-alloc-c
	install -d $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/include/huddle
	install -m 644 include/huddle/alloc.h $(DESTDIR)$(PREFIX)/include/huddle/
	install -m 755 target/release/libhuddle_alloc.so $(DESTDIR)$(PREFIX)/lib/
	install -m 644 target/release/libhuddle_alloc.a $(DESTDIR)$(PREFIX)/lib/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@INCLUDEDIR@|$(PREFIX)/include|' \
	    -e 's|@LIBDIR@|$(PREFIX)/lib|' -e 's|@VERSION@|$(ALLOC_VERSION)|' \
	    crates/alloc/huddle-alloc.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/huddle-alloc.pc
