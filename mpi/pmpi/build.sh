#!/usr/bin/env bash
# Builds the PMPI agent, its test programs and the MPI benchmarks once per MPI implementation
# found (the MPI ABI differs, so each gets its own build): build/mpi/<impl>/.
# No MPI compiler at all: one clear line, exit 0 (the rest of huddle builds without MPI), or
# exit 1 when HUDDLE_REQUIRE_MPI=1.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${HUDDLE_MPI_BUILD:-$root/build/mpi}
found=0
for impl in openmpi mpich; do
  cc=mpicc.$impl
  command -v "$cc" >/dev/null 2>&1 || continue
  found=1
  mkdir -p "$out/$impl"
  flags=(-O2 -g -Wall -Wextra -Wno-stringop-overflow)
  "$cc" "${flags[@]}" -fPIC -shared -o "$out/$impl/libhuddle_pmpi.so" "$root/mpi/pmpi/huddle_pmpi.c"
  # Bytes only (no time split, no receive/probe/completion wrappers): what huddle run, huddle
  # detect and huddle run --node-managers preload unless the policy is simmer.
  "$cc" "${flags[@]}" -DHUDDLE_PMPI_BYTES_ONLY -fPIC -shared -o "$out/$impl/libhuddle_pmpi_bytes.so" \
    "$root/mpi/pmpi/huddle_pmpi.c"
  for t in traffic nofinalize crash timesplit frames slurm_pattern; do
    "$cc" "${flags[@]}" -o "$out/$impl/$t" "$root/mpi/pmpi/tests/$t.c"
  done
  # The Fortran traffic test once per Fortran binding (mpif.h, use mpi, use mpi_f08).
  # -fallow-argument-mismatch: mpif.h and `use mpi` declare no buffer types, as in the real
  # codes built with gfortran >= 10 (-w: its warning per call says only that).
  fc=mpif90.$impl
  if command -v "$fc" >/dev/null 2>&1; then
    for b in mpifh mpi f08; do
      mkdir -p "$out/$impl/mod-$b"
      fflags=(-O2 -g -cpp "-DBIND_${b^^}" -J "$out/$impl/mod-$b")
      [ $b = f08 ] || fflags+=(-fallow-argument-mismatch -w)
      "$fc" "${fflags[@]}" -o "$out/$impl/traffic-f-$b" "$root/mpi/pmpi/tests/traffic.F90"
    done
  else
    echo "pmpi: $fc not found: the Fortran traffic tests of $impl were not built (install gfortran)" >&2
  fi
  for src in "$root"/bench/pmpi/*.c "$root"/bench/simmer/*.c; do
    [ -e "$src" ] || continue
    "$cc" "${flags[@]}" -I"$(dirname "$src")" -o "$out/$impl/$(basename "$src" .c)" "$src" -lm
  done
  echo "pmpi: built $out/$impl (agent, tests, benchmarks) with $cc"
done
if [ $found = 0 ]; then
  echo "pmpi: no MPI compiler found (looked for mpicc.openmpi and mpicc.mpich): install Open MPI or MPICH (scripts/bootstrap does); the PMPI agent was not built" >&2
  [ "${HUDDLE_REQUIRE_MPI:-0}" = 1 ] && exit 1
fi
exit 0
