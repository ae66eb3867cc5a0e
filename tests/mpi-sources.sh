#!/usr/bin/env bash
# `huddle run -- mpirun ...` (and `huddle detect`) counts MPI traffic exactly: the PMPI agent for the program's MPI
# is preloaded without being asked, and in the report every pair of ranks' MPI threads holds
# the agent's bytes (symmetrized, / block size) with source "mpi", for C and for Fortran
# programs under Open MPI and MPICH, and for a binary started without a launcher.
# --source faults leaves MPI out; a program that is no MPI program gets page faults alone.
# --policy none: no migration, so nothing is aged and the cells equal the totals.
set -euo pipefail
cd "$(dirname "$0")/.."
huddle=target/release/huddle
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
pass() { echo "ok   $*"; }
fail() { echo "FAIL $*"; fails=$((fails + 1)); }

# check DIR NP: every pair of rank threads in DIR equals rank-matrix.csv; prints a summary.
check() {
  awk -v np="$2" -v block=256 '
    FILENAME ~ /tasks.json$/ {
      if ($1 == "\"index\":") { idx = $2 + 0 }
      if ($1 == "\"mpi_rank\":") { task[$2 + 0] = idx; ranks++ }
      next
    }
    FILENAME ~ /rank-matrix.csv$/ { n = split($0, f, ","); for (j = 1; j <= n; j++) R[rr + 0, j - 1] = f[j]; rr++; next }
    FILENAME ~ /matrix-sources.csv$/ { n = split($0, f, ","); for (j = 1; j <= n; j++) S[sr + 0, j - 1] = f[j]; sr++; next }
    FILENAME ~ /matrix.csv$/ { n = split($0, f, ","); for (j = 1; j <= n; j++) M[mr + 0, j - 1] = f[j]; mr++; next }
    END {
      if (ranks != np) { print "tasks.json names " ranks + 0 " rank threads, wanted " np; exit 1 }
      bad = 0; pairs = 0
      for (a = 0; a < np; a++) for (b = a + 1; b < np; b++) {
        i = task[a]; j = task[b]
        want = (R[a, b] + R[b, a]) / 2 / block
        got = M[i, j] + 0
        d = got - want; if (d < 0) d = -d
        if (S[i, j] != "mpi" || d > 1e-5 * (want + 1)) {
          print "ranks " a "," b " (tasks " i "," j "): " got " from " S[i, j] ", wanted " want " from mpi"; bad++
        }
        pairs++
      }
      if (bad) exit 1
      print pairs " rank pairs equal to the agent'"'"'s bytes"
    }' "$1/tasks.json" "$1/rank-matrix.csv" "$1/matrix-sources.csv" "$1/matrix.csv"
}

for impl in openmpi mpich; do
  case $impl in
    openmpi) launch=(mpirun.openmpi --allow-run-as-root --oversubscribe --bind-to none -np 4) ;;
    mpich) launch=(mpirun.mpich -np 4) ;;
  esac
  for prog in traffic traffic-f-mpifh traffic-f-f08; do
    dir=$tmp/$impl-$prog
    args=("$tmp/expected.csv")
    [ $prog = traffic ] && args+=(all)
    if ! timeout 180 "$huddle" run --quiet --policy none --report "$dir" -- "${launch[@]}" \
      "build/mpi/$impl/$prog" "${args[@]}" >"$tmp/log" 2>&1; then
      fail "$impl $prog: huddle run failed: $(tail -3 "$tmp/log")"
      continue
    fi
    if ! cmp -s "$dir/rank-matrix.csv" "$tmp/expected.csv"; then
      fail "$impl $prog: the rank matrix differs from the program's known traffic"
    elif ! grep -q 'PMPI agent (MPI bytes between ranks)' "$dir/run.json"; then
      fail "$impl $prog: run.json does not name the PMPI agent as a source"
    elif ! grep -q '"rearmed_pages": 0,' "$dir/run.json"; then
      fail "$impl $prog: single-threaded ranks, yet the fault agent re-armed pages: $(grep -o '"rearmed_pages": [0-9]*' "$dir/run.json")"
    elif msg=$(check "$dir" 4); then
      pass "$impl $prog: $msg, sources in matrix-sources.csv, no page re-armed in single-threaded ranks"
    else
      fail "$impl $prog: $msg"
    fi
  done
done

# The same default (--source both) on a rank with two busy threads (an OpenMP program under
# mpirun): the fault agent re-arms there, and its threads' sharing is seen.
dir=$tmp/hybrid msg=""
if OMP_NUM_THREADS=2 timeout 120 "$huddle" run --quiet --policy none --report "$dir" -- \
  mpirun.openmpi --allow-run-as-root --oversubscribe --bind-to none -np 1 \
  build/layouts/layout-c pipeline --seconds 2 --out-dir "$tmp" >"$tmp/log" 2>&1 &&
  msg=$(python3 - "$dir/run.json" 2>&1 <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["rearmed_pages"] > 0 and d["events"] > 0, (d["rearmed_pages"], d["events"])
print(f"{d['rearmed_pages']} pages re-armed, {d['events']} events")
PY
  ); then
  pass "a rank with two busy threads: $msg"
else
  fail "a rank with two busy threads: $(tail -3 "$tmp/log") $msg"
fi

# huddle detect: the same merge, the rank matrix beside OUT, sources and ranks in OUT.json.
for impl in openmpi mpich; do
  case $impl in
    openmpi) launch=(mpirun.openmpi --allow-run-as-root --oversubscribe --bind-to none -np 4) ;;
    mpich) launch=(mpirun.mpich -np 4) ;;
  esac
  out=$tmp/detect-$impl.csv
  if ! timeout 180 "$huddle" detect --out "$out" -- "${launch[@]}" "build/mpi/$impl/traffic-f-mpifh" \
    "$tmp/expected.csv" >"$tmp/log" 2>&1; then
    fail "$impl detect: $(tail -3 "$tmp/log")"
  elif ! cmp -s "${out%.csv}.ranks.csv" "$tmp/expected.csv"; then
    fail "$impl detect: OUT.ranks.csv differs from the program's known traffic"
  elif msg=$(python3 - "${out%.csv}.json" "${out%.csv}.ranks.csv" 2>&1 <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
R = [[int(x) for x in l.split(",")] for l in open(sys.argv[2])]
row = {r: k for k, r in enumerate(d["row_mpi_ranks"]) if r is not None}
assert sorted(row) == [0, 1, 2, 3], f"rows of ranks: {d['row_mpi_ranks']}"
for a in range(4):
    for b in range(a + 1, 4):
        i, j = row[a], row[b]
        want = (R[a][b] + R[b][a]) / 2 / d["block_size"]
        got = d["matrix"][i][j]
        assert d["cell_sources"][i][j] == "mpi", f"ranks {a},{b}: source {d['cell_sources'][i][j]}"
        assert abs(got - want) <= 1e-9 * (want + 1), f"ranks {a},{b}: {got}, wanted {want}"
        assert d["matrix"][j][i] == got, "not symmetric"
# Single-threaded ranks: MPI counts their traffic, so none of their faults reach the table.
assert d["stats"]["comm_events"] == 0, f"{d['stats']['comm_events']} page-fault events"
print("6 rank pairs equal to the agent's bytes, sources and ranks in OUT.json, no page-fault event")
EOF
  ); then
    pass "$impl detect: $msg"
  else
    fail "$impl detect: $msg"
  fi
done

# --faults-between-ranks keeps the ranks' faults, for comparing the two sources.
out=$tmp/detect-between.csv
if timeout 180 "$huddle" detect --faults-between-ranks --out "$out" -- mpirun.openmpi --allow-run-as-root \
  --oversubscribe --bind-to none -np 4 build/mpi/openmpi/traffic "$tmp/expected.csv" all >"$tmp/log" 2>&1 &&
  events=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["stats"]["comm_events"])' "${out%.csv}.json") &&
  [ "$events" -gt 0 ]; then
  pass "detect --faults-between-ranks: $events page-fault events between the ranks"
else
  fail "detect --faults-between-ranks: ${events:-?} page-fault events; $(tail -3 "$tmp/log")"
fi

# A binary that links libmpi, started alone (a singleton world of one rank): the agent is
# preloaded too, and the run ends normally.
dir=$tmp/singleton
if timeout 60 "$huddle" run --quiet --policy none --report "$dir" -- build/mpi/mpich/traffic "$tmp/expected.csv" p2p \
  >"$tmp/log" 2>&1 && grep -q '"mpi: 1 ranks on this node' "$dir/run.json"; then
  pass "singleton binary linking libmpich: agent preloaded, 1 rank seen"
else
  fail "singleton: $(tail -3 "$tmp/log"; grep -o '"mpi: [^"]*' "$dir/run.json" 2>/dev/null)"
fi

# Without --report: nothing of the run stays beside the boards, and the agent says nothing on
# the program's stderr.
boards=${XDG_RUNTIME_DIR:+$XDG_RUNTIME_DIR/huddle}
boards=${boards:-/tmp/huddle-$(id -u)}
before=$(ls "$boards" 2>/dev/null | grep -c '^huddle-run-' || true)
out=$(timeout 120 "$huddle" run --quiet -- mpirun.mpich -np 2 build/mpi/mpich/traffic "$tmp/expected.csv" 2>&1) && rc=0 || rc=$?
after=$(ls "$boards" 2>/dev/null | grep -c '^huddle-run-' || true)
if [ $rc = 0 ] && [ "$before" = "$after" ] && ! grep -q 'huddle-pmpi' <<<"$out"; then
  pass "no --report: no board or rank matrix left in $boards, no agent line on stderr"
else
  fail "no --report: exit $rc, huddle-run-* files $before -> $after, output '$out'"
fi

# attach to a job whose ranks run with the agent preloaded by the user: the board is found by
# the ranks' pids and merged; the job runs on to its end with its known traffic.
timeout 120 mpirun.mpich -np 2 -genv LD_PRELOAD "$PWD/build/mpi/mpich/libhuddle_pmpi.so" \
  -genv HUDDLE_RANK_MATRIX "$tmp/attach-ranks.csv" build/mpi/mpich/idleness 1 400 65536 10000 \
  >"$tmp/attach-job.log" 2>&1 &
job=$!
sleep 1
if timeout 60 "$huddle" attach --quiet --policy none --seconds 2 --report "$tmp/attach" "$job" >"$tmp/log" 2>&1 &&
  grep -q 'PMPI agent (MPI bytes between ranks)' "$tmp/attach/run.json" &&
  grep -q mpi "$tmp/attach/matrix-sources.csv"; then
  pass "attach: the running job's board found and merged ($(grep -o '"mpi: [^"]*' "$tmp/attach/run.json" | cut -c2-60)...)"
else
  fail "attach: $(tail -3 "$tmp/log"; grep -o '"mpi: [^"]*' "$tmp/attach/run.json" 2>/dev/null)"
fi
if wait "$job" && [ -s "$tmp/attach-ranks.csv" ]; then
  pass "attach: the job ran on to its end and wrote its rank matrix"
else
  fail "attach: the job did not end normally: $(tail -3 "$tmp/attach-job.log")"
fi
out=$("$huddle" attach --source mpi --seconds 1 $$ 2>&1) && rc=0 || rc=$?
if [ $rc = 0 ] && grep -q 'no PMPI board' <<<"$out"; then
  pass "attach --source mpi without a board: one line, page faults alone"
else
  fail "attach --source mpi without a board: exit $rc, '$out'"
fi

# --source faults: no agent, no MPI cells.
dir=$tmp/faults
if timeout 120 "$huddle" run --quiet --policy none --source faults --report "$dir" -- mpirun.mpich -np 2 \
  build/mpi/mpich/traffic "$tmp/expected.csv" >"$tmp/log" 2>&1 &&
  [ ! -e "$dir/matrix-sources.csv" ] && [ ! -e "$dir/rank-matrix.csv" ] && ! grep -q 'PMPI agent' "$dir/run.json"; then
  pass "--source faults: no PMPI agent, no MPI cells"
else
  fail "--source faults: $(tail -3 "$tmp/log")"
fi

# --source mpi: the agent's bytes alone, no page-fault records and no fault agent (perf keeps
# only the task records for the task table).
dir=$tmp/mpi-only
if timeout 120 "$huddle" run --quiet --policy none --source mpi --report "$dir" -- \
  mpirun.openmpi --allow-run-as-root --oversubscribe --bind-to none -np 4 \
  build/mpi/openmpi/traffic "$tmp/expected.csv" all >"$tmp/log" 2>&1 &&
  cmp -s "$dir/rank-matrix.csv" "$tmp/expected.csv" && msg=$(check "$dir" 4) &&
  python3 - "$dir/run.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["detection_source"] == "PMPI agent (MPI bytes between ranks)", d["detection_source"]
assert d["events"] == 0 and d["rearmed_pages"] == 0, (d["events"], d["rearmed_pages"])
assert any("PERF_COUNT_SW_DUMMY" in n for n in d["notes"]), d["notes"]
PY
then
  pass "--source mpi: $msg, no page-fault records, no fault agent"
else
  fail "--source mpi: $(tail -3 "$tmp/log")"
fi

# No MPI program: --source mpi says so in one line and page faults go on.
out=$(timeout 60 "$huddle" run --quiet --policy none --source mpi -- true 2>&1) && rc=0 || rc=$?
if [ $rc = 0 ] && [ "$(grep -c 'no MPI launcher and no libmpi linked' <<<"$out")" = 1 ]; then
  pass "--source mpi on a program without MPI: one line, exit 0"
else
  fail "--source mpi without MPI: exit $rc, '$out'"
fi
out=$("$huddle" run --source pmpi -- true 2>&1) && rc=0 || rc=$?
if [ $rc = 2 ] && grep -q "expected faults, mpi or both" <<<"$out"; then
  pass "--source pmpi: exit 2, '$out'"
else
  fail "--source pmpi: exit $rc, '$out'"
fi

[ $fails = 0 ] && echo "mpi sources: all passed" || echo "mpi sources: $fails failed"
[ $fails = 0 ]
