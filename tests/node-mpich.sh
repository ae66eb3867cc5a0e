#!/usr/bin/env bash
# Node managers (`huddle node`, docs/cluster.md) under MPICH's hydra (mpirun.mpich) on the two
# network-namespace hosts hA and hB of mpi/svm/tests/netns-hosts.sh, hydra "logging in" through
# the fake ssh (-launcher-exec). The job and the checks are those of tests/node-managers.sh
# (tests/node/common.sh): 8 ranks of tests/node/pairs.c, 4 per host, partners i and 3-i of a
# host exchanging 256 KiB per iteration.
#  1. `huddle run --node-managers --report DIR -- mpirun.mpich ...`: same output as without
#     huddle, one node manager per host attached to the host's hydra_pmi_proxy with that host's
#     ranks only, partners pinned together and the pairs apart, started soon after the board,
#     nothing left behind, the job's matrix and page.
#     The same without a shared file system: each host sees an empty tmpfs over the report's
#     parent (NH_PRIVATE of netns-agent), so the reports come back through hydra's forwarding
#     of the ranks' stderr, which hydra interleaves with the other ranks' output.
#  2. The variables passed by hand (hydra's -genv, as a user would): hA's node manager killed
#     with SIGKILL mid-job; the job still ends with the same output, hB's report is finished.
# Debian's MPICH 4.0.2 hangs in MPI_Finalize over UCX's TCP transport (between any two hosts,
# huddle or not), so the job is linked with tests/node/mpich-finalize.c, which skips the
# endpoint close that hangs (why it is safe: that file). MPICH's ranks spin while they wait and
# 8 of them share this machine's 2 CPUs: an iteration takes about 20 ms, hence few of them.
# Skips (exit 0) only when the kernel refuses namespaces.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
huddle=$root/target/release/huddle
lib=$root/build/mpi/mpich/libhuddle_pmpi.so
DAEMON=hydra_pmi_proxy
NODE_TEST_ITERS=${NODE_TEST_ITERS:-300}
NT_MPICC=mpicc.mpich

# shellcheck source=../mpi/svm/tests/netns-hosts.sh
. mpi/svm/tests/netns-hosts.sh
# shellcheck source=node/common.sh
. tests/node/common.sh
nt_prepare mpich "MPICH"

nt_hosts_up "node managers under MPICH" tests/node/mpich-finalize.c

# UCX between the hosts only over their veths (as nh_mpirun does); hydra passes the whole
# environment on to the ranks, huddle's variables included.
export UCX_NET_DEVICES=hveth0
launcher=(mpirun.mpich -launcher ssh -launcher-exec "$NH_AGENT" -hosts hA:4,hB:4
  -localhost "$NH_NET.1" -n 8)
program=("$tmp/pairs" 4 "$ITERS" "$BYTES")

nt_plain_run "${launcher[@]}" "${program[@]}"
nt_huddle_run "${launcher[@]}" "${program[@]}"
mkdir -p "$tmp/launch-only"
export NH_PRIVATE=$tmp/launch-only
NT_REPORT=$tmp/launch-only/report NT_VIA="through the launcher's stderr" nt_huddle_run "${launcher[@]}" "${program[@]}"
unset NH_PRIVATE
nt_delivery_check "$tmp/launch-only/report"
rep=$tmp/report2
nt_sigkill_run "$rep" "${launcher[@]}" -genv LD_PRELOAD "$lib" -genv HUDDLE_NODE 1 -genv HUDDLE_BIN "$huddle" \
  -genv HUDDLE_NODE_REPORT "$rep" -genv HUDDLE_RANK_MATRIX none "${program[@]}"
nt_summary "node-manager (MPICH)"
