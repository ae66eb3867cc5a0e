# PMPI agent (mpi/pmpi): built once per MPI found into build/mpi/<impl>/, tested with each.
BUILD_STEPS += build-pmpi
TEST_STEPS += test-pmpi

.PHONY: build-pmpi test-pmpi
build-pmpi:
	mpi/pmpi/build.sh

test-pmpi: build-pmpi
	HUDDLE_REQUIRE_MPI=1 mpi/pmpi/build.sh
	mpi/pmpi/tests/run.sh
