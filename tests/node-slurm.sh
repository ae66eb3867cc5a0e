#!/usr/bin/env bash
# Node managers (`huddle node`, docs/cluster.md) under a real Slurm on two hosts made of
# network namespaces: Debian's munged, slurmctld and one slurmd per host (hA, hB of
# mpi/svm/tests/netns-hosts.sh), configured, started and removed by this script
# (tests/node/slurm-hosts.sh); the job is launched with `srun -N 2 -n 8` and Open MPI's ranks
# get their PMIx server from slurmstepd (srun's --mpi=pmix, the test cluster's default).
#
# The job and the checks are those of tests/node-managers.sh (tests/node/common.sh): ranks
# (0,3),(1,2) on hA and (4,7),(5,6) on hB exchange 256 KiB per iteration.
#  1. `huddle run --node-managers --report DIR -- srun -N 2 -n 8 ./pairs ...`: the job prints
#     what it prints without huddle; a node manager ran on each host, attached to the ranks'
#     parent (slurmstepd), saw only its own host's ranks and pinned partners on one PU and
#     the pairs apart; nothing is left; DIR/index.html has both nodes.
#  1b. The same with the report directory under launch-only/, over which every slurmd (and so
#     each node's ranks and manager) sees an empty tmpfs of its own mount namespace: the
#     reports come through srun's stderr (slurmstepd forwards the ranks' stderr), huddle run
#     says so, no framed line reaches the job's output, each delivery.json says complete.
#  2. Without huddle (`srun --export=ALL,LD_PRELOAD=...,HUDDLE_NODE=1,...`, as a user would):
#     both node managers start; hA's is killed with SIGKILL while the job runs; the job ends
#     normally with the same output, hB's finishes its report, nothing is left behind.
#  4. (below 3) The job of a user other than root, as on any cluster: `huddle run
#     --node-managers` and srun run as a system user this test adds (and removes); its ranks
#     run below root's slurmstepd, which the node managers must leave alone while they watch
#     and pin the user's ranks. Same checks as 1. With Open MPI, then a real application as
#     that user: LAMMPS (Debian's lmp, tests/apps/in.lj, 2 x 2 x 1 grid), 4 ranks, 2 per
#     host, under `huddle run --node-managers`: the thermo output equals a plain srun run's,
#     each node's report has its own two ranks, and the job's rank matrix has the grid's
#     shape (face pairs over 100 times the diagonal ones).
#  6. (after 5) Slurm again with task/affinity, 2 CPUs per node as the machine has: a batch
#     script runs two steps at the same time (`srun --exact ... &`), each with one rank per
#     node, which Slurm binds to a CPU of the step's own: each node then has two node
#     managers unaware of each other, and each must keep to its own step's CPU (run.json's
#     allowed_pus: one PU each, not the same), with both steps' output unchanged. Then the
#     same under task/cgroup (with proctrack/cgroup, ConstrainCores=yes): each step's CPU is
#     its cpuset cgroup's, not a binding of Slurm's.
#  3. A batch script (`sbatch --wait -N 2 -n 8`) with two srun steps that set the variables by
#     hand with HUDDLE_NODE_REPORT=DIR/job-%j/step-%s: each step's node managers report into
#     their own DIR/job-JOB/step-0 and step-1 (made with their parent), both nodes each, the
#     steps' output unchanged. Then another job into DIR/job-JOB/step-%s, which is step-0
#     again: it runs and says it keeps the earlier report, whose files are unchanged.
#  5. (last) Slurm again with proctrack/cgroup, as most clusters run it: each step's processes,
#     the node manager (a rank's child) included, in a freezer cgroup of the step, which
#     slurmstepd kills once the step's tasks have ended. A job with the variables by hand: when
#     srun returns both node reports are finished (the rank that started each manager waited
#     for it at MPI_Finalize), the output is unchanged, and the checks of 1 hold.
# Afterwards no Slurm or munge daemon, step or file of this test is left (checked too).
# `tests/node-slurm.sh mpich` runs the same with MPICH's ranks (`srun --mpi=pmi2`, Slurm's
# PMI-2), the job linked with tests/node/mpich-finalize.c as in tests/node-mpich.sh, and few
# iterations (MPICH's waiting ranks spin on the 2 shared CPUs).
# Skips (exit 0) only when the kernel refuses namespaces; a missing Slurm is a failure.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
huddle=$root/target/release/huddle
mpi=${1:-openmpi}
case $mpi in
  openmpi) extra=() ;;
  mpich) NT_MPICC=mpicc.mpich NODE_TEST_ITERS=${NODE_TEST_ITERS:-300} extra=(tests/node/mpich-finalize.c) ;;
  *) echo "usage: tests/node-slurm.sh [openmpi|mpich]" >&2; exit 2 ;;
esac
lib=$root/build/mpi/$mpi/libhuddle_pmpi.so
DAEMON=slurmstepd

for f in "$huddle" "$lib"; do
  [ -e "$f" ] || { echo "FAIL $f missing: run make build (and make build-pmpi)"; exit 1; }
done
command -v "${NT_MPICC:-mpicc.openmpi}" >/dev/null ||
  { echo "FAIL ${NT_MPICC:-mpicc.openmpi} not found: run scripts/bootstrap"; exit 1; }

# shellcheck source=../mpi/svm/tests/netns-hosts.sh
. mpi/svm/tests/netns-hosts.sh
# shellcheck source=node/slurm-hosts.sh
. tests/node/slurm-hosts.sh
# shellcheck source=node/common.sh
. tests/node/common.sh
missing=$(sl_missing | tr '\n' ' ')
[ -z "$missing" ] || { echo "FAIL Slurm or munge not installed (no ${missing% }): run scripts/bootstrap --slurm"; exit 1; }

tmp=$(mktemp -d /tmp/huddle-node-slurm.XXXXXX)
user_made=
cleanup() {
  [ -z "$JOB_PID" ] || kill -TERM "$JOB_PID" 2>/dev/null
  sl_down
  nh_down
  rm -rf "$tmp"
  [ -z "$user_made" ] || userdel "$user_made" 2>/dev/null
}
trap cleanup EXIT
trap 'exit 130' INT TERM

nt_hosts_up "node managers under Slurm ($mpi)" ${extra[@]+"${extra[@]}"}
t0=$SECONDS
# Each slurmd (and so each node's ranks and manager) sees an empty tmpfs over launch-only/.
mkdir -p "$tmp/launch-only"
NH_PRIVATE=$tmp/launch-only sl_up || { echo "FAIL cannot start Slurm on the namespace hosts (see above)"; exit 1; }
echo "     Slurm up: $(sinfo -h -o '%D nodes %t (%N)') ($((SECONDS - t0)) s)"
slurm_dir=$SL_DIR

# Open MPI's ranks, as srun starts them: TCP between hosts over the namespace network only;
# mpi_yield_when_idle: 8 ranks share 2 CPUs, so waiting ranks must not spin. MPICH's: UCX
# over the hosts' veths only. srun passes its whole environment on (--export=ALL).
if [ "$mpi" = openmpi ]; then
  export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_tcp_if_include=$NH_NET.0/24 OMPI_MCA_mpi_yield_when_idle=1
  launcher=(srun -N 2 -n 8)
else
  export UCX_NET_DEVICES=hveth0
  launcher=(srun --mpi=pmi2 -N 2 -n 8)
fi
program=("$tmp/pairs" 4 "$ITERS" "$BYTES")
# Which tasks got through MPI_Init (nt_ompi_init_crash); srun passes it on.
export PAIRS_INIT_DIR=$tmp/init
mkdir -p "$PAIRS_INIT_DIR"
chmod 1777 "$PAIRS_INIT_DIR" # the other user's job of section 4 too

nt_plain_run "${launcher[@]}" "${program[@]}"
nt_huddle_run "${launcher[@]}" "${program[@]}"
NT_REPORT=$tmp/launch-only/report NT_VIA="through the launcher's stderr" nt_huddle_run "${launcher[@]}" "${program[@]}"
nt_delivery_check "$tmp/launch-only/report"
rep=$tmp/report2
nt_sigkill_run "$rep" "${launcher[@]}" \
  "--export=ALL,LD_PRELOAD=$lib,HUDDLE_NODE=1,HUDDLE_BIN=$huddle,HUDDLE_NODE_REPORT=$rep,HUDDLE_RANK_MATRIX=none" \
  "${program[@]}"

# 3. Steps of a batch script, each with its own report directory (HUDDLE_NODE_REPORT=.../step-%s).
batch_steps_run() {
  local rep t0=$SECONDS rc s h bad= sums
  local vars="ALL,LD_PRELOAD=$lib,HUDDLE_NODE=1,HUDDLE_BIN=$huddle,HUDDLE_RANK_MATRIX=none"
  {
    echo '#!/bin/sh'
    for s in 0 1; do
      echo "${launcher[*]} --export=$vars,HUDDLE_NODE_REPORT=$tmp/batch/job-%j/step-%s ${program[*]} >$tmp/step-$s.out || exit 1"
    done
  } >"$tmp/steps.sh"
  timeout -k 5 300 sbatch --wait -N 2 -n 8 -o "$tmp/batch.log" "$tmp/steps.sh" >/dev/null 2>"$tmp/batch.err"
  rc=$?
  rep=$(echo "$tmp"/batch/job-*)
  for s in 0 1; do cmp -s "$tmp/plain.out" "$tmp/step-$s.out" || bad+=" step $s's output differs;"; done
  if [ $rc -eq 0 ] && [ -z "$bad" ]; then
    pass "sbatch --wait with two srun steps: rc 0, each step's output unchanged ($((SECONDS - t0)) s)"
  else
    fail "sbatch with two steps: rc $rc,$bad $(tail -n 3 "$tmp/batch.err" "$tmp/batch.log" 2>/dev/null | tr '\n' ' ')"
  fi
  # Nobody waits for the managers of a job launched without huddle: give them the time.
  bad=
  for s in 0 1; do
    for h in hA hB; do
      for _ in $(seq 1 200); do
        grep -q '"state": "done"' "$rep/step-$s/node-$h/node.json" 2>/dev/null && break
        sleep 0.1
      done
      grep -q '"state": "done"' "$rep/step-$s/node-$h/node.json" 2>/dev/null && [ -s "$rep/step-$s/node-$h/index.html" ] ||
        bad+=" step-$s/node-$h: $(tail -1 "$rep/step-$s/node-$h/node.log" 2>/dev/null);"
    done
  done
  if [ -z "$bad" ]; then
    pass "each step's node managers reported into its own directory: ${rep#"$tmp"/}/step-0 and step-1, node-hA and node-hB each"
  else
    fail "batch steps' reports missing:$bad"
  fi
  # A new job (its one step is step 0 too) into the same pattern: the earlier report stays.
  sums=$(cat "$rep"/step-0/node-*/* 2>/dev/null | md5sum)
  timeout -k 5 150 "${launcher[@]}" "--export=$vars,HUDDLE_NODE_REPORT=$rep/step-%s" "${program[@]}" \
    >"$tmp/again.out" 2>"$tmp/again.err"
  rc=$?
  no_node_managers 20
  if [ $rc -eq 0 ] && cmp -s "$tmp/plain.out" "$tmp/again.out" &&
    grep -q "step-0/node-hA holds an earlier job's report, kept" "$tmp/again.err" &&
    grep -q "step-0/node-hB holds an earlier job's report, kept" "$tmp/again.err" &&
    [ "$sums" = "$(cat "$rep"/step-0/node-*/* 2>/dev/null | md5sum)" ]; then
    pass "a later job into step-0 again: same output, both nodes say they keep the earlier report, its files unchanged"
  else
    fail "a later job into step-0 again: rc $rc, $(grep -c . "$tmp/again.err") stderr lines: $(grep huddle "$tmp/again.err" | head -2 | tr '\n' ' ')"
  fi
  left=$(leftovers "$rep/step-0" "$rep/step-1")
  if [ -z "$left" ]; then
    pass "nothing left after the batch steps"
  else
    fail "left behind after the batch steps: $(echo "$left" | tr '\n' ' ')"
  fi
}
batch_steps_run

# 4. A user's job. The user has no home: HOME is a directory of its own under $tmp.
user_run() {
  local user=huddle-slurm-test home=$tmp/user root_board_dir=$board_dir
  if ! id "$user" >/dev/null 2>&1; then
    useradd --system --no-create-home --shell /usr/sbin/nologin "$user" ||
      { fail "cannot add the user $user for the non-root job"; return; }
    user_made=$user
  fi
  chmod 755 "$tmp" && mkdir -m 755 "$home" && chown "$user" "$home" ||
    { fail "cannot make $home for $user"; return; }
  nt_as=(runuser -u "$user" -- env -u XDG_RUNTIME_DIR "HOME=$home")
  board_dir=/tmp/huddle-$(id -u "$user")
  NT_REPORT=$home/report nt_huddle_run "${launcher[@]}" "${program[@]}"
  nt_as=()
  board_dir=$root_board_dir
  if grep -q "belongs to another user: only the processes of huddle's own user below it are watched" \
    "$home"/report/node-hA/run.json "$home"/report/node-hB/run.json 2>/dev/null &&
    [ "$(stat -c %U "$home/report/node-hA/node.json" 2>/dev/null)" = "$user" ]; then
    pass "as $user: both node managers ran as $user, watched the ranks and left root's slurmstepd alone (their reports say so)"
  else
    fail "as $user: the node reports do not say that the ranks' parent was another user's"
  fi
  [ "$mpi" != openmpi ] || lammps_run "$home"
  [ -z "$user_made" ] || { userdel "$user_made" && user_made=; }
}

lammps_run() { # HOME (the user's, its working directory)
  local home=$1 rep=$1/lammps t0=$SECONDS rc msg left
  local lmp=(srun -N 2 -n 4 --ntasks-per-node=2 lmp -in "$root/tests/apps/in.lj" -screen none)
  command -v lmp >/dev/null || { fail "lammps: lmp not installed (scripts/bootstrap --apps)"; return; }
  (cd "$home" && timeout -k 5 120 "${nt_as[@]}" "${lmp[@]}" -log "$home/lmp-plain.log") >/dev/null 2>&1
  (cd "$home" && timeout -k 5 150 "${nt_as[@]}" "$huddle" run --node-managers --quiet --report "$rep" -- \
    "${lmp[@]}" -log "$home/lmp-huddle.log") >/dev/null 2>"$tmp/lmp.err"
  rc=$?
  thermo() { sed -n '/^Step /,/^Loop time/p' "$1" | grep -v '^Loop time'; }
  if [ $rc -eq 0 ] && [ -n "$(thermo "$home/lmp-plain.log")" ] &&
    diff <(thermo "$home/lmp-plain.log") <(thermo "$home/lmp-huddle.log") >/dev/null; then
    pass "lammps as the user, 4 ranks on 2 hosts: rc 0, thermo output equal to the plain srun run's ($((SECONDS - t0)) s for both)"
  else
    fail "lammps as the user: rc $rc or thermo output differs: $(grep -v '^\[' "$tmp/lmp.err" | tail -2 | tr '\n' ' ')"
  fi
  if msg=$(python3 - "$rep" <<'EOF' 2>&1
import json, sys
rep = sys.argv[1]
bad = []
for host, mine in (("hA", [0, 1]), ("hB", [2, 3])):
    try:
        node = json.load(open(f"{rep}/node-{host}/node.json"))
        tasks = json.load(open(f"{rep}/node-{host}/tasks.json"))
    except Exception as e:
        bad.append(f"{host}: {e}")
        continue
    ranks = sorted(t["mpi_rank"] for t in tasks if t.get("mpi_rank") is not None)
    if node.get("state") != "done" or ranks != mine:
        bad.append(f"{host}: state {node.get('state')}, ranks {ranks} (want {mine})")
m = [[int(v) for v in line.split(",")] for line in open(f"{rep}/rank-matrix.csv")]
pair = lambda a, b: m[a][b] + m[b][a]
face = min(pair(0, 1), pair(2, 3), pair(0, 2), pair(1, 3))
diag = max(pair(0, 3), pair(1, 2))
if face <= 100 * diag:
    bad.append(f"rank matrix: face pairs >= {face} bytes, diagonal <= {diag}")
if bad:
    sys.exit("; ".join(bad))
print(f"both node reports done with their own ranks (hA 0,1; hB 2,3), the job's rank matrix has the grid's shape (face >= {face} bytes, diagonal <= {diag})")
EOF
  ); then
    pass "lammps as the user: $msg"
  else
    fail "lammps as the user: $msg"
  fi
  no_node_managers 10
  left=$(leftovers "$rep")
  [ -z "$left" ] || fail "left behind after lammps: $(echo "$left" | tr '\n' ' ')"
}
user_run

# 5. proctrack/cgroup.
cgroup_run() {
  local rep=$tmp/report-cgroup rc where bad= h left
  sl_down
  SL_PROCTRACK=cgroup sl_up || { fail "cannot start Slurm with proctrack/cgroup (see above)"; return; }
  slurm_dirs+=" $SL_DIR"
  where=$(srun -N 2 -n 2 cat /proc/self/cgroup 2>&1 | grep -m1 -o '[a-z,]*:/.*job_[0-9]*/step_[0-9]*')
  [ -n "$where" ] || { fail "proctrack/cgroup: the job's tasks are in no cgroup of their step"; return; }
  timeout -k 5 150 "${launcher[@]}" \
    "--export=ALL,LD_PRELOAD=$lib,HUDDLE_NODE=1,HUDDLE_BIN=$huddle,HUDDLE_NODE_REPORT=$rep,HUDDLE_RANK_MATRIX=none" \
    "${program[@]}" >"$tmp/cgroup.out" 2>"$tmp/cgroup.err"
  rc=$?
  for h in hA hB; do
    grep -q '"state": "done"' "$rep/node-$h/node.json" 2>/dev/null || bad+=" $h: $(tail -1 "$rep/node-$h/node.log" 2>/dev/null);"
  done
  if [ $rc -eq 0 ] && cmp -s "$tmp/plain.out" "$tmp/cgroup.out" && [ -z "$bad" ]; then
    pass "proctrack/cgroup (a task in $where): rc 0, the same output, both node reports finished when srun returned"
  else
    fail "proctrack/cgroup: rc $rc, output '$(cat "$tmp/cgroup.out")',$bad $(grep -v '^\[' "$tmp/cgroup.err" | tail -2 | tr '\n' ' ')"
  fi
  nt_node_check "$rep"
  no_node_managers 10
  left=$(leftovers "$rep")
  [ -z "$left" ] || fail "left behind after the job under proctrack/cgroup: $(echo "$left" | tr '\n' ' ')"
}
slurm_dirs=$slurm_dir
cgroup_run

# 6. task/affinity, then task/cgroup (each step's cpuset cgroup): two steps at once on each
# node, each step's manager kept to its step's CPUs.
two_steps_run() { # PLUGIN (affinity or cgroup)
  local plugin=$1 rep=$tmp/concurrent-$1 rc s h bad= pus left cpuset=
  local vars="ALL,LD_PRELOAD=$lib,HUDDLE_NODE=1,HUDDLE_BIN=$huddle,HUDDLE_RANK_MATRIX=none"
  local step=("${launcher[@]:0:${#launcher[@]}-4}" --exact -N 2 -n 2)
  local two=("$tmp/pairs" 2 "$ITERS" "$BYTES")
  sl_down
  if [ "$plugin" = cgroup ]; then
    SL_TASK=cgroup SL_PROCTRACK=cgroup SL_CONSTRAIN_CORES=yes SL_CPUS=2 sl_up ||
      { fail "cannot start Slurm with task/cgroup (see above)"; return; }
  else
    SL_TASK=affinity SL_CPUS=2 sl_up || { fail "cannot start Slurm with task/affinity (see above)"; return; }
  fi
  slurm_dirs+=" $SL_DIR"
  if [ "$plugin" = cgroup ]; then
    # A step's task is confined by a cpuset cgroup of the step holding one CPU.
    cpuset=$(srun --exact -N 1 -n 1 sh -c 'p=$(grep -m1 ":cpuset:" /proc/self/cgroup | cut -d: -f3);
      echo "$p $(cat "/sys/fs/cgroup/cpuset$p/cpuset.cpus")"' 2>&1)
    if ! [[ $cpuset =~ job_[0-9]+/step_[0-9]+(/task_[0-9]+)?\ [0-9]+$ ]]; then
      fail "task/cgroup: a step's task is in no one-CPU cpuset cgroup of its step: $cpuset"
      return
    fi
  fi
  timeout -k 5 120 "${step[@]}" "${two[@]}" >"$tmp/two-plain.out" 2>"$tmp/two-plain.err" ||
    { fail "task/$plugin: the 2-rank job without huddle failed: $(tail -2 "$tmp/two-plain.err" | tr '\n' ' ')"; return; }
  {
    echo '#!/bin/sh'
    for s in 0 1; do
      echo "{ ${step[*]} --export=$vars,HUDDLE_NODE_REPORT=$rep/step-%s ${two[*]} >$tmp/two-$s.out 2>$tmp/two-$s.err; echo \$? >$tmp/two-$s.rc; } &"
    done
    echo 'wait'
  } >"$tmp/two-steps.sh"
  # A step that Slurm did not run (srun's rc not 0) is tried once more, the first try's
  # diagnostics printed; a step that ran and printed something else fails at once.
  local try
  for try in 1 2; do
    bad=
    rm -rf "$rep" "$tmp"/two-[01].*
    timeout -k 5 300 sbatch --wait -N 2 -n 4 -o "$tmp/two-batch.log" "$tmp/two-steps.sh" >/dev/null 2>"$tmp/two-batch.err"
    rc=$?
    for s in 0 1; do
      # srun's own exit status and last words: a step that did not run says why here.
      cmp -s "$tmp/two-plain.out" "$tmp/two-$s.out" ||
        bad+=" step $s's output differs (srun rc $(cat "$tmp/two-$s.rc" 2>/dev/null), output '$(head -c 200 "$tmp/two-$s.out" 2>/dev/null)', stderr: $(grep -v '^\[' "$tmp/two-$s.err" 2>/dev/null | tail -n 3 | tr '\n' ' '));"
    done
    for h in hA hB; do
      # Each manager's PUs, and whether the two ran at the same time (run.json's start and length).
      if pus=$(python3 - "$rep/step-0/node-$h/run.json" "$rep/step-1/node-$h/run.json" <<'EOF' 2>&1
import json, os, sys
missing = [p for p in sys.argv[1:] if not os.path.exists(p)]
if missing:
    sys.exit("no " + " nor ".join(missing))
a, b = (json.load(open(p)) for p in sys.argv[1:])
pa, pb = a["allowed_pus"], b["allowed_pus"]
overlap = min(a["started_unix"] + a["duration_s"], b["started_unix"] + b["duration_s"]) - max(a["started_unix"], b["started_unix"])
if len(pa) != 1 or len(pb) != 1 or pa == pb or overlap <= 0:
    sys.exit(f"PUs {pa} and {pb}, together for {overlap:.2f} s")
print(f"PU {pa[0]} and {pb[0]}, together for {overlap:.1f} s")
EOF
      ); then
        pus_of[$h]=$pus
      else
        bad+=" $h: $pus;"
      fi
    done
    [ -n "$bad" ] && [ $try -eq 1 ] && grep -qv '^0$' "$tmp"/two-[01].rc 2>/dev/null || break
    echo "     task/$plugin, two steps at once, first try: rc $rc,$bad"
    no_node_managers 10
  done
  if [ $rc -eq 0 ] && [ -z "$bad" ]; then
    pass "task/$plugin, two steps at once: both outputs unchanged, each node's two managers ran at the same time and kept to their own step's PU (hA: ${pus_of[hA]}; hB: ${pus_of[hB]})${cpuset:+; cpuset cgroup and CPUs of a task: $cpuset}"
  else
    fail "task/$plugin, two steps at once: rc $rc,$bad $(tail -n 2 "$tmp/two-batch.err" "$tmp/two-batch.log" 2>/dev/null | tr '\n' ' ')"
  fi
  no_node_managers 10
  left=$(leftovers "$rep/step-0" "$rep/step-1")
  [ -z "$left" ] || fail "left behind after the two steps: $(echo "$left" | tr '\n' ' ')"
}
declare -A pus_of
two_steps_run affinity
two_steps_run cgroup

# Slurm is gone with the test's hosts: no daemon, step or rank of it, no file of it.
sl_down
nh_down
left=$(pgrep -a -f "${slurm_dirs// /|}|$tmp/pairs|slurmstepd" | tr '\n' ';')
for d in $slurm_dirs /sys/fs/cgroup/*/slurm_hA /sys/fs/cgroup/*/slurm_hB; do
  [ ! -e "$d" ] || left+=" $d"
done
if [ -z "$left" ]; then
  pass "Slurm stopped: no munged, slurmctld, slurmd, slurmstepd or rank left, $slurm_dirs and the step cgroups removed"
else
  fail "left after stopping Slurm: $left"
fi
nt_summary "node-manager (Slurm, $mpi)"
