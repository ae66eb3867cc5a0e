#!/usr/bin/env bash
# Runs the svm litmus, stress, failure and application tests under one MPI (openmpi|mpich),
# np 2-4 oversubscribed, both protocols, one process per "node" (SVM_NODE_SIZE=1: every page
# travels through MPI) and two per node (the hybrid shared-copy path).  Every run is bounded.
set -u
mpi=${1:?usage: run-tests.sh openmpi|mpich}
here=$(cd "$(dirname "$0")/../../.." && pwd)
bin=$here/build/svm/$mpi
export SVM_TIMEOUT=60
fails=0
launch() { # np, env..., program args
    local np=$1; shift
    if [ "$mpi" = openmpi ]; then
        local xs=()
        for v in SVM_PROTOCOL SVM_NODE_SIZE SVM_TIMEOUT SVM_HOME SVM_PAGE_SIZE; do xs+=(-x "$v"); done
        # Open MPI's defaults, as a user's plain `mpirun -np N` gets them (svm picks its one-sided
        # component itself); root and oversubscription allowed through the environment
        OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
            timeout 300 mpirun.openmpi "${xs[@]}" -np "$np" "$@"
    else
        timeout 300 mpirun.mpich -np "$np" "$@"
    fi
}
run() { # description, np, command...
    local d=$1; shift
    local out rc t0=$SECONDS
    out=$(launch "$@" 2>&1); rc=$?
    if [ $rc -ne 0 ]; then echo "FAIL [$mpi] $d (rc $rc)"; echo "$out" | grep -v '^\[' | tail -15; fails=$((fails + 1));
    else echo "ok   [$mpi] $d ($((SECONDS - t0)) s)"; fi
}
for proto in ni base; do
    export SVM_PROTOCOL=$proto
    for ns in 1 2; do
        export SVM_NODE_SIZE=$ns SVM_HOME=block
        run "$proto node=$ns litmus (mp_lock barrier counter false_sharing syscall stress) np=3" 3 "$bin/litmus" all
        run "$proto node=$ns counter np=4" 4 "$bin/litmus" counter 100
    done
    export SVM_NODE_SIZE=1
    SVM_HOME=firsttouch SVM_PAGE_SIZE=8192 run "$proto firsttouch 8K pages barrier np=2" 2 "$bin/litmus" barrier
    SVM_HOME=cyclic run "$proto cyclic false_sharing np=4" 4 "$bin/litmus" false_sharing
    export SVM_HOME=block
    for a in fft lu ocean radix water taskq; do run "$proto app $a np=4" 4 "$bin/$a" --small; done
done
# A process that stops answering, and one that dies: the others must stop naming it.
export SVM_PROTOCOL=ni SVM_NODE_SIZE=1 SVM_TIMEOUT=5
for how in stop kill; do
    t0=$SECONDS
    out=$(launch 3 "$bin/litmus" die $how 2>&1); rc=$?
    if [ $rc -ne 0 ] && [ $((SECONDS - t0)) -lt 120 ] &&
        echo "$out" | grep -Eq "svm: rank [02]: rank 1 (\(pid [0-9]+, same node\) died|did not respond)|rank 1 .*(exited on signal|Killed)|BAD TERMINATION" &&
        ! echo "$out" | grep -q "survived"; then
        echo "ok   [$mpi] dead peer ($how): stopped naming rank 1 in $((SECONDS - t0)) s"
    else
        echo "FAIL [$mpi] dead peer ($how): rc $rc after $((SECONDS - t0)) s"; echo "$out" | tail -12; fails=$((fails + 1))
    fi
done
# Configuration errors are one line and exit non-zero.
out=$(SVM_PAGE_SIZE=5000 launch 1 "$bin/litmus" barrier 2>&1)
if [ $? -ne 0 ] && echo "$out" | grep -q "SVM_PAGE_SIZE=5000: must be a multiple of 4096"; then echo "ok   [$mpi] bad SVM_PAGE_SIZE rejected"
else echo "FAIL [$mpi] bad SVM_PAGE_SIZE not rejected"; fails=$((fails + 1)); fi
[ $fails -eq 0 ] || { echo "$fails svm test(s) failed under $mpi"; exit 1; }
