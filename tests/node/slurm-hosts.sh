# A real Slurm on the namespace hosts of mpi/svm/tests/netns-hosts.sh (source both; nh_up
# first): one munged and slurmctld in the root namespace (at $NH_NET.1, in their own UTS
# namespace named sl-ctl), one slurmd per host inside its namespace (`slurmd -N hA`, host
# name hA, as netns-agent gives it), all from Debian's packages (scripts/bootstrap --slurm)
# with a configuration, munge key, state, spool, logs and pid files under one temporary
# directory. sl_up starts them and waits for every node to be idle; sl_down stops them and
# removes that directory (idempotent). srun and sinfo find the cluster through SLURM_CONF,
# which sl_up exports.
#
# Choices for a VM: proctrack/linuxproc (SL_PROCTRACK=cgroup: proctrack/cgroup, each step's
# processes in a freezer cgroup of their own under slurm_HOST, removed by sl_down) and
# task/none (tasks inherit slurmd's CPU mask, the node managers pin them; SL_TASK=affinity:
# task/affinity, Slurm binds each task, which needs SL_CPUS no more than the machine has;
# SL_TASK=cgroup with SL_PROCTRACK=cgroup and SL_CONSTRAIN_CORES=yes: task/cgroup, each step's
# tasks in a cpuset cgroup of its CPUs), no accounting, select/cons_tres with 4 CPUs per node
# declared (SlurmdParameters=config_overrides: the namespace hosts share this machine's CPUs,
# and a job of 8 ranks on 2 nodes must fit without --overcommit), MpiDefault=pmix (Open MPI
# 4.1 of Debian starts under srun through PMIx), ports 16817/16818 (no clash with a real
# Slurm of this machine).
SL_DIR=
SL_CTLD=
SL_MUNGED=
SL_CPUS=${SL_CPUS:-4}

sl_missing() { # the programs of Slurm and munge that are not installed
    local p
    for p in munged munge slurmctld slurmd srun sinfo scontrol; do
        command -v "$p" >/dev/null || echo "$p"
    done
}

sl_down() { # idempotent; nh_down (after it) kills whatever is left inside the hosts
    local p h
    for h in $NH_HOSTS; do
        # slurmd, and the steps and ranks it started (slurmstepd outlives slurmd)
        for p in $(ip netns pids "huddle-$h" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
    done
    for p in $SL_CTLD $SL_MUNGED; do
        kill -TERM "$p" 2>/dev/null || continue
        for _ in $(seq 1 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$p" 2>/dev/null || true
    done
    SL_CTLD= SL_MUNGED=
    # proctrack/cgroup's per-node directories (slurmd leaves them), empty once all is killed.
    for h in $NH_HOSTS; do
        for p in /sys/fs/cgroup/*/slurm_"$h" /sys/fs/cgroup/slurm_"$h"; do
            [ -d "$p" ] && find "$p" -depth -type d -exec rmdir {} + 2>/dev/null
        done
    done
    [ -z "$SL_DIR" ] || rm -rf "$SL_DIR"
    SL_DIR=
    unset SLURM_CONF
    return 0
}

sl_pid() { # PIDFILE: the pid it holds, waiting up to 10 s for it
    local i
    for i in $(seq 1 100); do
        [ -s "$1" ] && { cat "$1"; return 0; }
        sleep 0.1
    done
    return 1
}

sl_up() { # 0 = every node idle, 1 = failure (one line on stderr, the logs' tails after it)
    local d h i=11 nodes=
    SL_DIR=$(mktemp -d /tmp/huddle-slurm.XXXXXX) || return 1
    d=$SL_DIR
    # Users other than root submit too: slurm.conf and munge's socket are theirs to use (the
    # key stays root's), and each node's TmpFS, the ranks' TMPDIR, is writable as /tmp is.
    chmod 755 "$d" || return 1
    mkdir -m 700 "$d/state" && mkdir -m 755 "$d/munge" || return 1
    head -c 1024 /dev/urandom >"$d/munge/munge.key" && chmod 400 "$d/munge/munge.key" || return 1
    for h in $NH_HOSTS; do
        nodes+="NodeName=$h NodeAddr=$NH_NET.$i CPUs=$SL_CPUS State=UNKNOWN"$'\n'
        mkdir -m 700 "$d/spool-$h" && mkdir -m 1777 "$d/tmp-$h" || return 1
        i=$((i + 1))
    done
    cat >"$d/slurm.conf" <<EOF
ClusterName=huddle-test
SlurmctldHost=sl-ctl($NH_NET.1)
SlurmctldPort=16817
SlurmdPort=16818
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$d/munge/sock
CredType=cred/munge
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool-%n
TmpFS=$d/tmp-%n
SlurmctldPidFile=$d/slurmctld.pid
SlurmdPidFile=$d/slurmd-%n.pid
SlurmctldLogFile=$d/slurmctld.log
SlurmdLogFile=$d/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/${SL_PROCTRACK:-linuxproc}
TaskPlugin=task/${SL_TASK:-none}
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
MpiDefault=pmix
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
ReturnToService=2
SchedulerType=sched/builtin
InactiveLimit=0
KillWait=5
MinJobAge=2
PlugStackConfig=$d/plugstack.conf
$nodes
PartitionName=test Nodes=$(echo $NH_HOSTS | tr ' ' ,) Default=YES MaxTime=10 State=UP OverSubscribe=NO
EOF
    : >"$d/plugstack.conf"
    # Read with proctrack/cgroup and task/cgroup only: the plugin that fits the machine's
    # cgroups, no memory limit, CPUs confined with SL_CONSTRAIN_CORES=yes.
    printf 'CgroupPlugin=autodetect\nConstrainCores=%s\nConstrainRAMSpace=no\n' "${SL_CONSTRAIN_CORES:-no}" >"$d/cgroup.conf"
    export SLURM_CONF=$d/slurm.conf
    munged --force --socket="$d/munge/sock" --key-file="$d/munge/munge.key" --pid-file="$d/munge/munged.pid" \
        --seed-file="$d/munge/seed" --log-file="$d/munge/log" >/dev/null 2>&1 &&
        SL_MUNGED=$(sl_pid "$d/munge/munged.pid") ||
        { echo "slurm-hosts: munged did not start: $(tail -1 "$d/munge/log" 2>/dev/null)" >&2; return 1; }
    unshare --uts sh -c 'hostname sl-ctl && exec slurmctld -i -f "$1"' sl-ctl "$d/slurm.conf" ||
        { echo "slurm-hosts: slurmctld did not start" >&2; tail -3 "$d/slurmctld.log" >&2; return 1; }
    SL_CTLD=$(sl_pid "$d/slurmctld.pid") ||
        { echo "slurm-hosts: slurmctld did not start" >&2; tail -3 "$d/slurmctld.log" >&2; return 1; }
    # Each slurmd (and so its steps and ranks) gets a /sys of its host's network namespace, as
    # `ip netns exec` would mount it, but with /sys/fs/cgroup carried over: UCX lists network
    # devices from /sys/class/net, and with the root namespace's /sys it finds only lo in a host
    # (MPICH's MPI_Init then aborts, no transport to the other host).
    for h in $NH_HOSTS; do
        # Its own mount namespace too: with NH_PRIVATE=DIR the host sees an empty tmpfs over
        # DIR, as a node that does not share that part of the launch node's file system.
        mkdir -m 700 "$d/cgroup-$h" || return 1
        nsenter --net="/run/netns/huddle-$h" unshare --uts --ipc --mount --propagation private sh -c '
            hostname "$1" || exit 1
            if [ -d /sys/fs/cgroup ]; then
                mount --rbind /sys/fs/cgroup "$3" && mount -t sysfs sysfs /sys && mount --move "$3" /sys/fs/cgroup
            else
                mount -t sysfs sysfs /sys
            fi || exit 1
            [ -z "$4" ] || mount -t tmpfs -o size=16m,mode=0755 huddle-private "$4" || exit 1
            # NH_SHM=DIR: the host'"'"'s own /dev/shm, DIR/HOST (see netns-agent).
            [ -z "$5" ] || { mkdir -p "$5/$1" && chmod 1777 "$5/$1" && mount --bind "$5/$1" /dev/shm; } || exit 1
            exec slurmd -N "$1" -f "$2"' slurmd "$h" "$d/slurm.conf" "$d/cgroup-$h" "${NH_PRIVATE:-}" "${NH_SHM:-}" ||
            { echo "slurm-hosts: slurmd of $h did not start" >&2; tail -3 "$d/slurmd-$h.log" >&2; return 1; }
    done
    for i in $(seq 1 300); do
        [ "$(sinfo -h -o '%t' 2>/dev/null | sort -u)" = idle ] && return 0
        sleep 0.1
    done
    echo "slurm-hosts: the nodes are not idle after 30 s: $(sinfo -h -N -o '%N %t %E' 2>&1 | tr '\n' ' ')" >&2
    tail -n 3 "$d/slurmctld.log" "$d"/slurmd-*.log >&2
    return 1
}
