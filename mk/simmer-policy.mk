# `huddle run --policy simmer` end to end (needs the PMPI agent and benchmarks of mk/pmpi.mk).
TEST_STEPS += test-simmer-policy

.PHONY: test-simmer-policy
test-simmer-policy: build-pmpi
	tests/simmer-policy.sh
