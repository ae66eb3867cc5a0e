#!/usr/bin/env bash
# Real applications under `huddle run`, short enough for `make test` (Debian's packages,
# installed by `scripts/bootstrap --apps`; inputs in this directory):
# - LAMMPS (Open MPI, 4 ranks on a 2 x 2 x 1 processor grid, Lennard-Jones): the thermo
#   output equals a plain run's, and the rank matrix in the report has the grid's shape
#   (each rank talks to its two face neighbours, not to its diagonal one);
# - HPCC (Open MPI, 4 ranks on a 2 x 2 grid): every test passes as in a plain run, the HPL
#   residual is the plain run's, and every pair of ranks communicates (FFT, RandomAccess and
#   PTRANS exchange with all);
# - GROMACS (`gmx mdrun`, 2 thread-MPI ranks, which are threads of one process, so page faults
#   alone): the energies with -reprod equal a plain run's, and the two ranks' threads share.
# Each must take under 30 s here; the script says how long each took.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
huddle=$root/target/release/huddle
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1 GMX_MAXBACKUP=-1
fails=0
pass() { echo "ok   $*"; }
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
# The launcher comes first after `--`: huddle tells the MPI from it (timeout goes outside).
mpirun=(mpirun.openmpi --allow-run-as-root --oversubscribe --bind-to none)
hrun=(timeout -k 5 120 "$huddle" run --quiet)

# rank_cell DIR A B: bytes rank A sent rank B, from the agent's rank matrix in DIR.
rank_cell() { awk -F, -v a="$2" -v b="$3" 'NR == a + 1 { print $(b + 1) }' "$1/rank-matrix.csv"; }

# --- LAMMPS ---
cd "$tmp"
t0=$SECONDS
timeout -k 5 120 "${mpirun[@]}" -np 4 lmp -in "$here/in.lj" -log lmp-plain.log -screen none
"${hrun[@]}" --report lmp -- "${mpirun[@]}" -np 4 lmp -in "$here/in.lj" -log lmp-huddle.log -screen none
thermo() { sed -n '/^Step /,/^Loop time/p' "$1" | grep -v '^Loop time'; }
if [ -n "$(thermo lmp-plain.log)" ] && diff <(thermo lmp-plain.log) <(thermo lmp-huddle.log) >/dev/null; then
  pass "lammps: thermo output under huddle run equals the plain run's ($(thermo lmp-plain.log | wc -l) lines)"
else
  fail "lammps: thermo output differs"
fi
# Grid 2 x 2 x 1, rank = x + 2 y: face pairs (0,1) (2,3) along x, (0,2) (1,3) along y;
# diagonal pairs (0,3) (1,2) only share the collectives.
face=() diag=()
for p in "0 1" "2 3" "0 2" "1 3"; do face+=($(( $(rank_cell lmp $p) + $(rank_cell lmp ${p#* } ${p% *}) ))); done
for p in "0 3" "1 2"; do diag+=($(( $(rank_cell lmp $p) + $(rank_cell lmp ${p#* } ${p% *}) ))); done
min_face=$(printf '%s\n' "${face[@]}" | sort -n | head -1)
max_diag=$(printf '%s\n' "${diag[@]}" | sort -n | tail -1)
if [ "$min_face" -gt $((100 * max_diag)) ] && grep -q '"mpi: 4 ranks' lmp/run.json && grep -q mpi lmp/matrix-sources.csv; then
  pass "lammps: rank matrix has the 2x2x1 grid's shape (face pairs >= $min_face bytes, diagonal <= $max_diag), merged as mpi cells"
else
  fail "lammps: rank matrix shape: face ${face[*]}, diagonal ${diag[*]}"
fi
echo "     lammps: $((SECONDS - t0)) s for both runs"

# --- HPCC ---
t0=$SECONDS
mkdir -p hpcc-plain hpcc-huddle
cp "$here/hpccinf.txt" hpcc-plain/
cp "$here/hpccinf.txt" hpcc-huddle/
(cd hpcc-plain && timeout -k 5 120 "${mpirun[@]}" -np 4 hpcc >/dev/null)
hpcc_rc=0
(cd hpcc-huddle && "${hrun[@]}" --report "$tmp/hpcc" -- "${mpirun[@]}" -np 4 hpcc >/dev/null 2>"$tmp/hpcc-huddle.err") ||
  hpcc_rc=$?
residual() { grep '||Ax-b||' "$1/hpccoutf.txt"; }
# HPCC reads its input in 81-byte pieces: a longer line shifts what follows, and PTRANS then
# ran on uninitialised block sizes (a crash in some runs, with or without huddle). Both runs
# must have read the input whole and run PTRANS (N = 400 / 2).
input_ok() { ! grep -q 'Error in line' "$1/hpccoutf.txt" && grep -q '^PTRANS_n=200$' "$1/hpccoutf.txt"; }
if [ $hpcc_rc = 0 ] && grep -q '^Success=1' hpcc-plain/hpccoutf.txt && grep -q '^Success=1' hpcc-huddle/hpccoutf.txt &&
  input_ok hpcc-plain && input_ok hpcc-huddle &&
  [ -n "$(residual hpcc-plain)" ] && [ "$(residual hpcc-plain)" = "$(residual hpcc-huddle)" ]; then
  pass "hpcc: every test passes under huddle run (PTRANS included), HPL residual equal to the plain run's"
else
  fail "hpcc: huddle run exit $hpcc_rc; $(grep -h '^Success' hpcc-*/hpccoutf.txt 2>/dev/null | tr '\n' ' ')"
  # Whether the agent re-armed anything, how a rank died, and where.
  { grep -h '"rearmed_pages\|"agent_cpu_s\|"exit_code\|"exit_signal\|"duration_s' "$tmp/hpcc/run.json" | tr -d ' \n'; } 2>/dev/null || true
  echo
  tail -5 "$tmp/hpcc-huddle.err" || true
  tail -3 hpcc-huddle/hpccoutf.txt 2>/dev/null || true
  { dmesg | grep -i 'hpcc.*\(segfault\|general protection\|trap\)' | tail -4; } 2>/dev/null || true
fi
zero=0
for a in 0 1 2 3; do for b in 0 1 2 3; do
  [ $a = $b ] || [ "$(rank_cell hpcc $a $b)" -gt 0 ] || zero=$((zero + 1))
done; done
[ $zero = 0 ] && grep -q '"mpi: 4 ranks' hpcc/run.json &&
  pass "hpcc: every rank sent to every other rank, merged as mpi cells" ||
  fail "hpcc: $zero empty pairs in the rank matrix"
echo "     hpcc: $((SECONDS - t0)) s for both runs"

# --- GROMACS (thread-MPI) ---
t0=$SECONDS
cp "$here/water.top" topol.top
gmx -quiet solvate -cs spc216.gro -box 3.72412 3.72412 3.72412 -o conf.gro -p topol.top >gmx-prep.log 2>&1
gmx -quiet grompp -f "$here/md.mdp" -c conf.gro -p topol.top -o md.tpr >>gmx-prep.log 2>&1
mdrun=(gmx -quiet mdrun -s md.tpr -ntmpi 2 -ntomp 1 -reprod -nb cpu)
timeout -k 5 120 "${mdrun[@]}" -deffnm plain >/dev/null 2>&1
"${hrun[@]}" --report gmx -- "${mdrun[@]}" -deffnm huddle >/dev/null 2>&1
energies() { grep -A8 'Step           Time' "$1" | grep -v 'Writing checkpoint\|^--'; }
if grep -q 'Domain decomposition grid 2 x 1 x 1' plain.log && [ -n "$(energies plain.log)" ] &&
  [ "$(energies plain.log)" = "$(energies huddle.log)" ]; then
  pass "gromacs: energies under huddle run equal the plain run's (-reprod, DD grid 2 x 1 x 1)"
else
  fail "gromacs: energies differ or no DD grid 2 x 1 x 1"
fi
# Two ranks on a machine whose PUs are all equally far apart (this 2-PU VM) put the agent to
# sleep after 0.3 s by default (nothing to map there): --watch always for the matrix.
"${hrun[@]}" --watch always --report gmx-watch -- "${mdrun[@]}" -deffnm watch >/dev/null 2>&1
total=$(awk -F, '{ for (i = 1; i <= NF; i++) s += $i } END { print s + 0 }' gmx-watch/matrix.csv)
tasks=$(grep -c '"tid"' gmx-watch/tasks.json)
if awk -v t="$total" 'BEGIN { exit !(t > 0) }' && [ "$tasks" -ge 2 ]; then
  pass "gromacs: $tasks threads, matrix total $total events between them (page faults; thread-MPI is no MPI library)"
else
  fail "gromacs: empty matrix ($tasks tasks)"
fi
echo "     gromacs: $((SECONDS - t0)) s for preparation and both runs"

[ $fails = 0 ] && echo "apps: all passed" || echo "apps: $fails failed"
[ $fails = 0 ]
