# `huddle run -- mpirun ...` with the PMPI agent's exact traffic merged in (needs the PMPI agent
# and its test programs of mk/pmpi.mk).
TEST_STEPS += test-mpi-sources

.PHONY: test-mpi-sources
test-mpi-sources: build-pmpi build-layouts
	tests/mpi-sources.sh
