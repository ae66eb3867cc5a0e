#!/usr/bin/env bash
# Tests of the PMPI agent with every MPI built by mpi/pmpi/build.sh: exact rank matrices for
# known traffic with 2 to 8 ranks (oversubscribed, as root) from C, and from Fortran through
# each binding (mpif.h, use mpi, use mpi_f08); the default matrix path, the board
# file, a program that never calls MPI_Finalize, a rank that crashes, the frames of node
# reports (frames.sh), and no MPI at all.
# Every launch runs under a timeout: nothing may hang.
set -uo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
builds=${HUDDLE_MPI_BUILD:-$root/build/mpi}
work=$(mktemp -d /tmp/huddle-pmpi-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
fails=0
pass() { echo "ok   $*"; }
fail() { echo "FAIL $*"; fails=$((fails + 1)); }

# launch IMPL NP PROG ARGS...: the program with the agent ($PMPI_LIB, else the full build)
# preloaded; HUDDLE_* pass through.
launch() {
  local impl=$1 np=$2; shift 2
  local lib=${PMPI_LIB:-$builds/$impl/libhuddle_pmpi.so}
  case $impl in
    openmpi) timeout -k 5 120 mpirun.openmpi --allow-run-as-root --oversubscribe -np "$np" \
               -x LD_PRELOAD="$lib" -x HUDDLE_RANK_MATRIX -x HUDDLE_BOARD "$@" ;;
    mpich)   timeout -k 5 120 mpirun.mpich -np "$np" -genv LD_PRELOAD "$lib" "$@" ;;
  esac
}

impls=()
for impl in openmpi mpich; do
  if [ -x "$builds/$impl/traffic" ] && command -v "mpirun.$impl" >/dev/null; then impls+=("$impl"); fi
done
if [ ${#impls[@]} = 0 ]; then
  echo "pmpi tests: no MPI build under $builds (run mpi/pmpi/build.sh; it needs Open MPI or MPICH)" >&2
  exit 1
fi

# The Rust reader of the board, built once.
(cd "$root" && cargo build -q -p simmer --example board) || { echo "pmpi tests: cannot build the board reader" >&2; exit 1; }
board_reader=${CARGO_TARGET_DIR:-$root/target}/debug/examples/board

for impl in "${impls[@]}"; do
  for np in 2 3 4 8; do
    mode=all; [ "$np" = 3 ] && mode=p2p
    export HUDDLE_RANK_MATRIX=$work/$impl-$np.csv HUDDLE_BOARD=$work/$impl-$np.board
    if ! launch "$impl" "$np" "$builds/$impl/traffic" "$work/$impl-$np.expected" "$mode" >"$work/log" 2>&1; then
      fail "$impl np=$np: traffic run failed: $(tail -3 "$work/log")"
    elif cmp -s "$work/$impl-$np.csv" "$work/$impl-$np.expected"; then
      pass "$impl np=$np: rank matrix equals the known traffic ($mode)"
    else
      fail "$impl np=$np: rank matrix differs from the known traffic"
      diff "$work/$impl-$np.csv" "$work/$impl-$np.expected" | head -5
    fi
    # The board named by HUDDLE_BOARD stays for the manager, private to the user, and the
    # Rust reader (crates/simmer board.rs) gets the same matrix from it.
    b=$work/$impl-$np.board
    if [ -f "$b" ] && [ "$(stat -c %a "$b")" = 600 ]; then pass "$impl np=$np: board kept, mode 0600"
    else fail "$impl np=$np: board $b missing or not mode 0600"; fi
    if "$board_reader" "$b" --matrix >"$work/from-board.csv" && cmp -s "$work/from-board.csv" "$work/$impl-$np.expected"; then
      pass "$impl np=$np: the Rust board reader gives the same matrix"
    else
      fail "$impl np=$np: board reader matrix differs"
    fi
    unset HUDDLE_RANK_MATRIX HUDDLE_BOARD
  done

  # Fortran: every binding, known traffic equal to the rank matrix (Open MPI's bindings call
  # PMPI_ names, MPICH's the MPI_ names; the agent answers to both).
  for b in mpifh mpi f08; do
    prog=$builds/$impl/traffic-f-$b
    if [ ! -x "$prog" ]; then
      fail "$impl Fortran ($b): $prog not built (mpif90.$impl missing?)"
      continue
    fi
    for np in 3 4; do
      export HUDDLE_RANK_MATRIX=$work/f-$impl-$b-$np.csv
      if ! launch "$impl" "$np" "$prog" "$work/f-$np.expected" >"$work/log" 2>&1; then
        fail "$impl Fortran ($b) np=$np: run failed: $(tail -3 "$work/log")"
      elif [ ! -f "$HUDDLE_RANK_MATRIX" ]; then
        fail "$impl Fortran ($b) np=$np: no rank matrix written"
      elif cmp -s "$HUDDLE_RANK_MATRIX" "$work/f-$np.expected"; then
        pass "$impl Fortran ($b) np=$np: rank matrix equals the known traffic"
      else
        fail "$impl Fortran ($b) np=$np: rank matrix differs from the known traffic"
        diff "$HUDDLE_RANK_MATRIX" "$work/f-$np.expected" | head -5
      fi
      unset HUDDLE_RANK_MATRIX
    done
  done

  # A board name reused by a later job with another world size: reinitialized, still exact.
  export HUDDLE_BOARD=$work/$impl-reuse.board HUDDLE_RANK_MATRIX=$work/reuse.csv
  ok=1
  for np in 4 2; do
    launch "$impl" "$np" "$builds/$impl/traffic" "$work/reuse.expected" p2p >"$work/log" 2>&1 || ok=0
    cmp -s "$work/reuse.csv" "$work/reuse.expected" || ok=0
    "$board_reader" "$HUDDLE_BOARD" --matrix | cmp -s - "$work/reuse.expected" || ok=0
  done
  [ $ok = 1 ] && pass "$impl: stale board of another job (4 then 2 ranks) is reinitialized" || fail "$impl: reused board name"
  unset HUDDLE_BOARD HUDDLE_RANK_MATRIX

  # Time split on the board: rank 0 computed >= 250 ms with its send pending, rank 1 waited
  # (>= 150 ms: it may be scheduled late on a loaded machine).
  export HUDDLE_BOARD=$work/$impl-time.board HUDDLE_RANK_MATRIX=$work/time.csv
  if launch "$impl" 2 "$builds/$impl/timesplit" >"$work/log" 2>&1 && "$board_reader" "$HUDDLE_BOARD" >"$work/board.json"; then
    read -r pend0 comp0 block1 cache <<<"$(awk -F'[:,]' '
      /"rank":/ {r=$2+0} /"pending_compute_ns":/ {p[r]=$2+0} /"compute_ns":/ {c[r]=$2+0}
      /"blocking_ns":/ {b[r]=$2+0} /"cache_misses":/ {m=$2}
      END {gsub(/ /, "", m); print p[0], c[0], b[1], m}' "$work/board.json")"
    if [ "${pend0:-0}" -ge 250000000 ] && [ "${comp0:-0}" -ge 250000000 ] && [ "${block1:-0}" -ge 150000000 ]; then
      pass "$impl: time split on the board (rank 0 pending-send compute $((pend0 / 1000000)) ms, rank 1 blocked $((block1 / 1000000)) ms, cache misses: $cache)"
    else
      fail "$impl: time split: pending $pend0 compute $comp0 blocked $block1"
    fi
  else
    fail "$impl: timesplit run: $(tail -3 "$work/log")"
  fi
  unset HUDDLE_BOARD HUDDLE_RANK_MATRIX

  # HUDDLE_PMPI_TIMESPLIT=0 (what huddle run sets unless the policy is simmer): the same
  # program's bytes are counted, the time split stays empty.
  export HUDDLE_BOARD=$work/$impl-nosplit.board HUDDLE_RANK_MATRIX=$work/nosplit.csv HUDDLE_PMPI_TIMESPLIT=0
  if launch "$impl" 2 "$builds/$impl/timesplit" >"$work/log" 2>&1 && "$board_reader" "$HUDDLE_BOARD" >"$work/board.json"; then
    read -r sent0 comp0 block1 <<<"$(awk -F'[:,]' '
      /"rank":/ {r=$2+0} /"sent_bytes":/ {s[r]=$2+0} /"compute_ns":/ {c[r]=$2+0}
      /"blocking_ns":/ {b[r]=$2+0}
      END {print s[0], c[0], b[1]}' "$work/board.json")"
    if [ "${sent0:-0}" -ge 4194304 ] && [ "${comp0:-1}" = 0 ] && [ "${block1:-1}" = 0 ]; then
      pass "$impl: HUDDLE_PMPI_TIMESPLIT=0: rank 0 sent $sent0 bytes, no time split"
    else
      fail "$impl: HUDDLE_PMPI_TIMESPLIT=0: sent $sent0 compute $comp0 blocked $block1"
    fi
  else
    fail "$impl: nosplit run: $(tail -3 "$work/log")"
  fi
  unset HUDDLE_BOARD HUDDLE_RANK_MATRIX HUDDLE_PMPI_TIMESPLIT

  # The bytes-only build (what huddle run and detect preload unless the policy is simmer):
  # the same rank matrix, no time split even when asked for, and no receive, probe or
  # completion wrapper at all (those calls go straight to the library).
  bytes=$builds/$impl/libhuddle_pmpi_bytes.so
  export HUDDLE_BOARD=$work/$impl-bytes.board HUDDLE_RANK_MATRIX=$work/bytes.csv PMPI_LIB=$bytes
  wrapped=$(nm -D --defined-only "$bytes" 2>/dev/null | grep -cE ' T P?MPI_(Recv|Probe|Wait|Test)[a-z]*$')
  if ! launch "$impl" 4 "$builds/$impl/traffic" "$work/bytes.expected" all >"$work/log" 2>&1; then
    fail "$impl: bytes-only build: traffic run failed: $(tail -3 "$work/log")"
  elif ! cmp -s "$work/bytes.csv" "$work/bytes.expected"; then
    fail "$impl: bytes-only build: rank matrix differs from the known traffic"
  elif [ "$wrapped" != 0 ]; then
    fail "$impl: bytes-only build defines $wrapped receive/probe/completion symbols"
  elif ! launch "$impl" 2 "$builds/$impl/timesplit" >"$work/log" 2>&1 ||
    ! "$board_reader" "$HUDDLE_BOARD" >"$work/board.json" ||
    [ "$(awk -F'[:,]' '/"compute_ns":/ {c += $2} END {print c + 0}' "$work/board.json")" != 0 ]; then
    fail "$impl: bytes-only build: the timesplit program ran with a time split or failed: $(tail -3 "$work/log")"
  else
    pass "$impl: bytes-only build: rank matrix equals the known traffic, no completion wrapper, no time split"
  fi
  unset HUDDLE_BOARD HUDDLE_RANK_MATRIX PMPI_LIB

  # Default path: printed once, the file is there, the per-job board is removed.
  (cd "$work" && launch "$impl" 2 "$builds/$impl/traffic" "$work/d.expected" all) >"$work/log" 2>&1
  lines=$(grep -c "huddle-pmpi: rank matrix" "$work/log")
  path=$(sed -n 's/.*written to //p' "$work/log" | head -1)
  if [ "$lines" = 1 ] && [ -f "$path" ] && cmp -s "$path" "$work/d.expected" && [ ! -e "${path%.csv}.board" ]; then
    pass "$impl: default rank matrix path printed once ($path), default board removed"
    rm -f "$path"
  else
    fail "$impl: default path: $lines announcements, path '$path'"
  fi

  # No MPI_Finalize: a clear line per rank, no hang, no matrix. (Boards of these two runs go to
  # $work: nobody finalizes them, so the agent leaves them for a reader.)
  export HUDDLE_RANK_MATRIX=$work/nofin.csv HUDDLE_BOARD=$work/nofin.board
  launch "$impl" 2 "$builds/$impl/nofinalize" >"$work/log" 2>&1
  rc=$?
  if [ "$rc" != 124 ] && [ "$rc" != 137 ] && grep -q "exited without calling MPI_Finalize" "$work/log" && [ ! -e "$work/nofin.csv" ]; then
    pass "$impl: program without MPI_Finalize reported (exit $rc), nothing hangs"
  else
    fail "$impl: program without MPI_Finalize: exit $rc: $(tail -3 "$work/log")"
  fi
  unset HUDDLE_RANK_MATRIX

  # A rank that crashes while another waits on it: the job ends with an error, no hang, and
  # the reader sees the crashed rank as not alive.
  export HUDDLE_BOARD=$work/crash.board
  launch "$impl" 3 "$builds/$impl/crash" >"$work/log" 2>&1
  rc=$?
  if [ "$rc" != 0 ] && [ "$rc" != 124 ] && [ "$rc" != 137 ]; then
    pass "$impl: crashing rank ends the job (exit $rc), no hang"
  else
    fail "$impl: crashing rank: exit $rc"
  fi
  # Read the whole snapshot first: grep -q stops reading at its first match.
  if "$board_reader" "$HUDDLE_BOARD" >"$work/board.json" && grep -q '"alive": false' "$work/board.json"; then
    pass "$impl: the board reader reports the crashed rank as not alive"
  else
    fail "$impl: crashed rank not reported dead on the board"
  fi
  unset HUDDLE_BOARD
done

# HUDDLE_NODE_REPORT's %j and %s (the steps of a batch script, docs/cluster.md).
for impl in "${impls[@]}"; do
  if msg=$("$builds/$impl/slurm_pattern" 2>&1); then
    pass "$impl: HUDDLE_NODE_REPORT's %j, %s and %% expanded, unset variables and overlong paths refused"
  else
    fail "$impl: HUDDLE_NODE_REPORT patterns: $msg"
  fi
done

# The frames a rank hands its node's report over in (no shared file system), read back by
# huddle relay.
"$root/mpi/pmpi/tests/frames.sh" || fails=$((fails + 1))

# No MPI installed: the build says so in one line (PATH without any mpicc).
mkdir -p "$work/bin"
for t in bash dirname mkdir cat; do ln -s "$(command -v $t)" "$work/bin/$t"; done
msg=$(PATH=$work/bin HUDDLE_MPI_BUILD=$work/nompi "$root/mpi/pmpi/build.sh" 2>&1); rc=$?
if [ $rc = 0 ] && grep -q "no MPI compiler found" <<<"$msg" && [ ! -e "$work/nompi" ]; then
  pass "no MPI installed: '$msg'"
else
  fail "no MPI installed: exit $rc, '$msg'"
fi
msg=$(PATH=$work/bin HUDDLE_REQUIRE_MPI=1 "$root/mpi/pmpi/build.sh" 2>&1); rc=$?
[ $rc = 1 ] && pass "no MPI installed with HUDDLE_REQUIRE_MPI=1: exit 1" || fail "HUDDLE_REQUIRE_MPI=1: exit $rc"

[ $fails = 0 ] && echo "pmpi tests: all passed" || echo "pmpi tests: $fails failed"
[ $fails = 0 ]
