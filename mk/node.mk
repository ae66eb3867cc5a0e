# Node managers (`huddle node`, docs/cluster.md): a 2-host MPI job on network-namespace hosts
# (mpi/svm/tests/netns-hosts.sh) under Open MPI, a node manager started by the job on each.
TEST_STEPS += test-node-managers

.PHONY: test-node-managers
test-node-managers: build-pmpi
	tests/node-managers.sh
