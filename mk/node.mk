# Node managers (`huddle node`, docs/cluster.md): a 2-host MPI job on network-namespace hosts
# (mpi/svm/tests/netns-hosts.sh) under Open MPI (and a 4-host one) and under MPICH's hydra, a
# node manager started by the job on each; and the same job under a real Slurm (srun) that the
# test starts on those hosts, with Open MPI's ranks and with MPICH's (and, with Open MPI, a
# user's LAMMPS job: Debian's lmp, hence --apps).
TEST_STEPS += test-node-managers test-node-four-hosts test-node-mpich test-node-slurm test-node-slurm-mpich

.PHONY: test-node-managers test-node-four-hosts test-node-mpich test-node-slurm test-node-slurm-mpich
test-node-managers: build-pmpi
	tests/node-managers.sh

test-node-four-hosts: build-pmpi
	tests/node-four-hosts.sh

test-node-mpich: build-pmpi
	tests/node-mpich.sh

# Exit 75: a rank crashed inside Open MPI's own MPI_Init (tests/node/common.sh,
# nt_ompi_init_crash); the script runs once more, and must pass then.
test-node-slurm: build-pmpi
	scripts/bootstrap --slurm --apps
	tests/node-slurm.sh || { [ $$? -eq 75 ] && echo "test-node-slurm: once more" && tests/node-slurm.sh; }

test-node-slurm-mpich: build-pmpi
	scripts/bootstrap --slurm
	tests/node-slurm.sh mpich
