#!/usr/bin/env bash
# Node managers on four hosts (issue 25's "2- to 4-host job"): the namespace hosts hA-hD of
# mpi/svm/tests/netns-hosts.sh, Open MPI's mpirun over the fake ssh, tests/node/pairs.c with 2
# ranks per host (local ranks 0 and 1 of a host exchange 256 KiB per iteration). Checked:
# `huddle run --node-managers --report DIR -- mpirun ...` exits 0 with the job's output of a
# plain run; every host has its own report (node-hX, state done, exactly its 2 ranks), its
# manager started less than 1 s after the host's board, and DIR/rank-matrix.csv is the 8x8
# job matrix. The other checks (pinning, hygiene, SIGKILL, reports without a shared file
# system) are tests/node-managers.sh's on two hosts. Skips (exit 0) only when the kernel
# refuses namespaces.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
huddle=$root/target/release/huddle
lib=$root/build/mpi/openmpi/libhuddle_pmpi.so
DAEMON=orted
export NH_HOSTS="hA hB hC hD"

# shellcheck source=../mpi/svm/tests/netns-hosts.sh
. mpi/svm/tests/netns-hosts.sh
# shellcheck source=node/common.sh
. tests/node/common.sh
nt_prepare openmpi "Open MPI"
nt_hosts_up "node managers on four hosts"

launcher=(mpirun.openmpi --allow-run-as-root --host hA:2,hB:2,hC:2,hD:2 -np 8 --bind-to none
  --mca plm_rsh_agent "$NH_AGENT" --mca plm_rsh_no_tree_spawn 1
  --mca oob_tcp_if_include "$NH_NET.0/24" --mca btl self,vader,tcp
  --mca btl_tcp_if_include "$NH_NET.0/24" --mca mpi_yield_when_idle 1)
program=("$tmp/pairs" 2 3000 "$BYTES")

nt_plain_run "${launcher[@]}" "${program[@]}"
rep=$tmp/report
timeout -k 5 150 "$huddle" run --node-managers --quiet --report "$rep" -- "${launcher[@]}" "${program[@]}" \
  >"$tmp/run.out" 2>"$tmp/run.err"
rc=$?
if [ $rc -ne 0 ]; then
  fail "huddle run --node-managers on 4 hosts: rc $rc: $(tail -3 "$tmp/run.err")"
elif ! cmp -s "$tmp/plain.out" "$tmp/run.out"; then
  fail "huddle run --node-managers on 4 hosts: the job's output differs: $(cat "$tmp/run.out")"
elif msg=$(python3 - "$rep" <<'EOF' 2>&1
import json, os, sys
rep = sys.argv[1]
bad, seen = [], []
for k, host in enumerate(["hA", "hB", "hC", "hD"]):
    try:
        node = json.load(open(os.path.join(rep, "node-" + host, "node.json")))
    except Exception as e:
        bad.append(f"{host}: {e}")
        continue
    ranks = sorted(r["rank"] for r in node.get("ranks", []))
    delay = node.get("start_delay_s")
    if node.get("state") != "done" or ranks != [2 * k, 2 * k + 1]:
        bad.append(f"{host}: state {node.get('state')}, ranks {ranks} (wanted {[2 * k, 2 * k + 1]})")
    elif delay is None or not 0 <= delay < 1:
        bad.append(f"{host}: manager started {delay} s after its board (want < 1 s)")
    else:
        seen.append(f"{host} {delay:.2f} s")
rows = [l for l in open(os.path.join(rep, "rank-matrix.csv")) if l.strip()]
if len(rows) != 8 or any(len(l.split(",")) != 8 for l in rows):
    bad.append(f"rank-matrix.csv is not 8x8: {len(rows)} rows")
if bad:
    sys.exit("; ".join(bad))
print("managers up after their boards: " + ", ".join(seen))
EOF
); then
  pass "huddle run --node-managers on 4 hosts: the job's output, a report per host with its own 2 ranks, $msg, the 8x8 rank matrix"
else
  fail "huddle run --node-managers on 4 hosts: $msg"
fi
if no_node_managers 10; then
  pass "no huddle node process left"
else
  fail "huddle node processes left: $(node_managers | tr '\n' ' ')"
fi
nt_summary "node-manager (4 hosts)"
