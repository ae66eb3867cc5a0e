# svm: the shared-virtual-memory library (mpi/svm), built once per MPI with its mpicc, its
# pkg-config files (huddle-svm = Open MPI build, huddle-svm-mpich = MPICH build), the litmus
# tests and the applications.
SVM_BUILD := build/svm
SVM_MPIS := openmpi mpich
SVM_VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
SVM_APPS := fft lu ocean radix water taskq
SVM_CFLAGS := -O2 -g -Wall -Wextra -Werror

BUILD_STEPS += build-svm
TEST_STEPS += test-svm

.PHONY: build-svm test-svm

build-svm:
	@set -e; for m in $(SVM_MPIS); do \
	  d=$(SVM_BUILD)/$$m; mkdir -p $$d/pkgconfig; \
	  mpicc.$$m $(SVM_CFLAGS) -fPIC -shared -Iinclude -o $$d/libhuddle-svm.so mpi/svm/svm.c -lpthread -lrt; \
	  pc=huddle-svm; [ $$m = openmpi ] || pc=huddle-svm-$$m; \
	  sed -e 's|@PREFIX@|$(abspath .)|' -e 's|@INCLUDEDIR@|$(abspath include)|' -e 's|@LIBDIR@|$(abspath $(SVM_BUILD))/'$$m'|' \
	      -e 's|@VERSION@|$(SVM_VERSION)|' -e "s|@MPI@|$$m|" mpi/svm/huddle-svm.pc.in > $$d/pkgconfig/$$pc.pc; \
	  flags="$$(PKG_CONFIG_PATH=$(abspath $(SVM_BUILD))/$$m/pkgconfig pkg-config --cflags --libs $$pc)"; \
	  cc $(SVM_CFLAGS) -Impi/svm mpi/svm/tests/litmus.c -o $$d/litmus $$flags; \
	  mpicc.$$m $(SVM_CFLAGS) -Impi/svm mpi/svm/bench/svmbench.c -o $$d/svmbench $$flags; \
	  for a in $(SVM_APPS); do cc $(SVM_CFLAGS) mpi/svm/apps/$$a.c -o $$d/$$a $$flags -lm; done; \
	done

test-svm: build-svm
	mpi/svm/tests/run-tests.sh openmpi
	mpi/svm/tests/run-tests.sh mpich

# The same library across two "hosts" made from network namespaces (root; skips with a message
# only if the kernel refuses namespaces).  Open MPI only: MPICH 4.0.2 ch4:ucx hangs in
# MPI_Finalize over UCX's TCP transport in about a third of the runs (docs/svm.md).
TEST_STEPS += test-svm-netns
.PHONY: test-svm-netns
test-svm-netns: build-svm
	mpi/svm/tests/netns-hosts.sh openmpi
