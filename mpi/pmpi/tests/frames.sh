#!/usr/bin/env bash
# The agent's frames of a node report (built from mpi/pmpi/huddle_pmpi.c into
# build/mpi/IMPL/frames) read back by `huddle relay` (crates/relay): files of edge sizes
# (empty, one byte, around a line's 576 bytes, several lines, 100 KB of random bytes) come
# out the same, and the job's own lines among the frames come out unchanged.
set -uo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
builds=${HUDDLE_MPI_BUILD:-$root/build/mpi}
huddle=${HUDDLE:-$root/target/release/huddle}
[ -x "$huddle" ] || { echo "FAIL $huddle missing: run make build"; exit 1; }
work=$(mktemp -d /tmp/huddle-frames-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
fails=0
token=0123456789abcdef
mkdir -p "$work/in"
for n in 0 1 2 3 575 576 577 1152 100000; do head -c "$n" /dev/urandom >"$work/in/f$n"; done
for impl in openmpi mpich; do
  [ -x "$builds/$impl/frames" ] || continue
  rm -rf "$work/out"
  # The job's own output before and after the frames, one line without its newline.
  { echo "job line 1"; "$builds/$impl/frames" "$token" "$work"/in/f*; printf 'job line 2'; } >"$work/stream" 2>&1
  "$huddle" relay --token "$token" --dir "$work/out" <"$work/stream" >"$work/account" 2>"$work/passed"
  bad=
  for f in "$work"/in/f*; do
    cmp -s "$f" "$work/out/node-frames/$(basename "$f")" || bad+=" $(basename "$f")"
  done
  if [ -n "$bad" ]; then
    echo "FAIL $impl: files not rebuilt the same:$bad"; fails=$((fails + 1))
  elif [ "$(cat "$work/passed")" != "$(printf 'job line 1\njob line 2')" ]; then
    echo "FAIL $impl: the job's lines did not come through unchanged: $(head -c 200 "$work/passed")"; fails=$((fails + 1))
  else
    echo "ok   $impl: $(ls "$work/in" | wc -l) files framed by the agent ($(wc -l <"$work/stream") lines) rebuilt the same by huddle relay, the job's lines unchanged"
  fi
done
[ $fails = 0 ]
