#!/usr/bin/env bash
# Node managers (`huddle node`, docs/cluster.md) on two hosts made of network namespaces
# (mpi/svm/tests/netns-hosts.sh: hA and hB, Open MPI launching over a fake ssh).
#
# The job (tests/node/pairs.c) runs 8 ranks, 4 per host; inside each host local ranks i and
# 3-i exchange 256 KiB per iteration: pairs (0,3),(1,2) on hA and (4,7),(5,6) on hB, which
# neither a blocked nor a cyclic order of the host's 2 PUs puts together. Checked:
#  1. `huddle run --node-managers --report DIR -- mpirun ...`: the job prints what it prints
#     without huddle; a node manager ran on each host (DIR/node-hA, DIR/node-hB, state done)
#     and saw only its own host's ranks, attached to their parent (orted); each pinned its
#     ranks so that partners share a PU and the two pairs do not (from its decisions.json and
#     tasks.json), started soon after its host's board was created; afterwards no huddle
#     node process, board, scratch rank matrix or detection directory of the job is left.
#  1b. The same with a report directory that only the launch side sees (each host gets its own
#     empty tmpfs over the directory's parent: NH_PRIVATE of netns-agent), as on a cluster
#     without a shared file system: the node managers report into a node-local directory, the
#     ranks hand the reports over as framed lines on their stderr, and huddle run rebuilds them
#     from mpirun's stderr: the same checks as 1, huddle run says the reports came through the
#     launcher's stderr, no framed line reaches the job's output, and each node's
#     delivery.json says its whole report arrived.
#  1c. As 1b, hA's node manager killed with SIGKILL while the job runs: the job ends with the
#     same output and no rank waits for the dead manager; huddle run says hA's manager had not
#     finished (dead) and that hB's report came through mpirun's stderr; nothing is left.
#  1d. Without huddle on the launch side (the variables passed with -x), the node managers
#     started through tests/node/no-perf.c, which refuses them perf_event_open as Debian's and
#     Ubuntu's kernels refuse it to every user but root: they go on with the board's traffic
#     and the ranks listed from /proc, and pin as in 1.
#  2. Without huddle on the launch side (HUDDLE_NODE=1 and the agent passed with -x, as a
#     user would): both node managers start; hA's is killed with SIGKILL while the job runs;
#     the job still ends normally with the same output, hB's finishes its report, and nothing
#     is left behind.
# The checks are tests/node/common.sh's, shared with tests/node-slurm.sh (the same under srun).
# The namespace hosts share this machine's 2 CPUs: what is checked is each node manager's
# decisions and its hygiene, not a speed-up. Skips (exit 0) only when the kernel refuses
# namespaces.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
huddle=$root/target/release/huddle
lib=$root/build/mpi/openmpi/libhuddle_pmpi.so
DAEMON=orted

# shellcheck source=../mpi/svm/tests/netns-hosts.sh
. mpi/svm/tests/netns-hosts.sh
# shellcheck source=node/common.sh
. tests/node/common.sh
nt_prepare openmpi "Open MPI"

nt_hosts_up "node managers"

# The job's launcher command line: 4 ranks on each host, not bound (the kernel places them).
# mpi_yield_when_idle: 8 ranks share 2 CPUs, so waiting ranks must not spin.
launcher=(mpirun.openmpi --allow-run-as-root --host hA:4,hB:4 -np 8 --bind-to none
  --mca plm_rsh_agent "$NH_AGENT" --mca plm_rsh_no_tree_spawn 1
  --mca oob_tcp_if_include "$NH_NET.0/24" --mca btl self,vader,tcp
  --mca btl_tcp_if_include "$NH_NET.0/24" --mca mpi_yield_when_idle 1)
program=("$tmp/pairs" 4 "$ITERS" "$BYTES")

nt_plain_run "${launcher[@]}" "${program[@]}"
nt_huddle_run "${launcher[@]}" "${program[@]}"

mkdir -p "$tmp/launch-only"
export NH_PRIVATE=$tmp/launch-only
NT_REPORT=$tmp/launch-only/report NT_VIA="through the launcher's stderr" nt_huddle_run "${launcher[@]}" "${program[@]}"
unset NH_PRIVATE
nt_delivery_check "$tmp/launch-only/report"

# 1c: the node-local report directory of hA is found through its node.json (the namespace
# hosts share /tmp).
rep=$tmp/launch-only/report-killed
export NH_PRIVATE=$tmp/launch-only
t0=$SECONDS
timeout -k 5 150 "$huddle" run --node-managers --quiet --report "$rep" -- "${launcher[@]}" "${program[@]}" \
  >"$tmp/kill1.out" 2>"$tmp/kill1.err" &
JOB_PID=$!
victim=
for _ in $(seq 1 150); do
  # This job's scratch report only: a crashed earlier job may have left one behind.
  victim=$(find "$board_dir" -maxdepth 3 -path "$board_dir/report-*/node-hA/node.json" -newer "$tmp/started" \
    -exec sed -n 's/^ *"pid": \([0-9]*\).*/\1/p' {} + 2>/dev/null | head -1)
  [ -n "$victim" ] && break
  sleep 0.1
done
[ -n "$victim" ] && sleep 0.5 && kill -KILL "$victim"
wait "$JOB_PID"
rc=$?
JOB_PID=
unset NH_PRIVATE
if [ -z "$victim" ]; then
  fail "not shared: no node manager of hA found in $board_dir/report-*/node-hA within 15 s"
elif [ $rc -eq 0 ] && cmp -s "$tmp/plain.out" "$tmp/kill1.out" &&
  grep -qF "node manager of $rep/node-hA had not finished when its ranks handed the report over (it was dead: killed?)" "$tmp/kill1.err" &&
  grep -qF "node report in $rep/node-hB (through the launcher's stderr)" "$tmp/kill1.err" &&
  grep -q "did not finish (killed?)" "$rep/index.html"; then
  pass "not shared, hA's manager (pid $victim) killed: rc 0, the same output, huddle run and the job page say hA's manager died and hB's report came through mpirun's stderr ($((SECONDS - t0)) s)"
else
  fail "not shared, hA's manager killed: rc $rc: $(grep -v '^\[' "$tmp/kill1.err" | tail -4)"
fi
no_node_managers 10
left=$(leftovers "$rep")
[ -z "$left" ] || fail "left behind after the job with a killed node manager (not shared): $(echo "$left" | tr '\n' ' ')"

nt_no_perf_run "$tmp/report-no-perf" "${launcher[@]}" -x "LD_PRELOAD=$lib" -x HUDDLE_NODE=1 \
  -x "HUDDLE_BIN=$tmp/no-perf-huddle" -x "HUDDLE_NODE_REPORT=$tmp/report-no-perf" -x HUDDLE_RANK_MATRIX=none \
  "${program[@]}"

rep=$tmp/report2
nt_sigkill_run "$rep" "${launcher[@]}" -x "LD_PRELOAD=$lib" -x HUDDLE_NODE=1 -x "HUDDLE_BIN=$huddle" \
  -x "HUDDLE_NODE_REPORT=$rep" -x HUDDLE_RANK_MATRIX=none "${program[@]}"
nt_summary node-manager
