# Node managers (`huddle node`, docs/cluster.md): a 2-host MPI job on network-namespace hosts
# (mpi/svm/tests/netns-hosts.sh) under Open MPI, a node manager started by the job on each;
# and the same job under a real Slurm (srun) that the test starts on those hosts.
TEST_STEPS += test-node-managers test-node-slurm

.PHONY: test-node-managers test-node-slurm
test-node-managers: build-pmpi
	tests/node-managers.sh

test-node-slurm: build-pmpi
	scripts/bootstrap --slurm
	tests/node-slurm.sh
