#!/usr/bin/env bash
# `huddle run --policy simmer` on an MPI benchmark under Open MPI and MPICH: the run completes,
# the policy compares windows of the PMPI board, the report says so, and the rank matrix the
# preloaded agent wrote equals the benchmark's known traffic byte for byte.
set -euo pipefail
cd "$(dirname "$0")/.."
huddle=target/release/huddle
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for impl in openmpi mpich; do
  case $impl in
    openmpi) launch=(mpirun.openmpi --allow-run-as-root --oversubscribe --bind-to none -np 4) ;;
    mpich) launch=(mpirun.mpich -np 4) ;;
  esac
  BENCH_EXPECTED=$tmp/$impl-expected.csv timeout 180 "$huddle" run --quiet --policy simmer \
    --report "$tmp/$impl" -- "${launch[@]}" "build/mpi/$impl/idleness" 3 300 65536 1000 >/dev/null
  fail() { echo "huddle run --policy simmer ($impl): $*" >&2; exit 1; }
  grep -q '"policy": "simmer"' "$tmp/$impl/run.json" || fail "run.json does not name the policy"
  grep -Eq 'simmer: [1-9][0-9]* windows compared' "$tmp/$impl/run.json" ||
    fail "no board window compared: $(grep -o 'simmer: [^"]*' "$tmp/$impl/run.json" | tr '\n' ' ')"
  cmp -s "$tmp/$impl/rank-matrix.csv" "$tmp/$impl-expected.csv" || fail "rank matrix differs from the known traffic"
  [ -s "$tmp/$impl/index.html" ] || fail "no report page"
  echo "huddle run --policy simmer ($impl): ok"
done
# attach cannot preload the agent: a one-line refusal with exit 2.
set +e
out=$("$huddle" attach --policy simmer $$ 2>&1)
rc=$?
set -e
[ "$rc" -eq 2 ] || { echo "attach --policy simmer: exit $rc, wanted 2"; exit 1; }
echo "$out" | grep -q "needs the PMPI agent" || { echo "attach --policy simmer: unexpected '$out'"; exit 1; }
echo "huddle attach --policy simmer refused: ok"
