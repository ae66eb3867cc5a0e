#!/usr/bin/env python3
"""Where huddle's time goes on a fully subscribed MPI job: LAMMPS (tests/apps/in.lj) with
ABLATE_RANKS ranks (default 16), each configuration in alternating order over ABLATE_ROUNDS
rounds (default 3); prints time / the OS's (`--bind-to none`) time per configuration.

The parts are switched on one at a time over a job that mpirun already binds one rank per core,
so that pinning cannot hide a cost: the PMPI agent preloaded without huddle, then huddle with the
PMPI board only (`--source mpi --no-agent`), with perf page-fault events only (`--source faults
--no-agent`), with everything but pinning (`--policy none`). After the timed rounds each huddle
configuration runs once more with --report, untimed, for the CPU time huddle itself used."""
import json, os, statistics, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HUDDLE = os.path.join(ROOT, "target", "release", "huddle")
PMPI = os.path.join(ROOT, "build", "mpi", "openmpi", "libhuddle_pmpi.so")
N = int(os.environ.get("ABLATE_RANKS", "16"))
ROUNDS = int(os.environ.get("ABLATE_ROUNDS", "3"))
STEPS = os.environ.get("ABLATE_STEPS", "12000")
px = {2: 2, 4: 2, 8: 4, 16: 4}[N]
lmp = ["-np", str(N), "lmp", "-in", os.path.join(ROOT, "tests", "apps", "in.lj"), "-var", "px", str(px),
       "-var", "py", str(N // px), "-var", "nsteps", STEPS, "-log", "none", "-screen", "none"]
mpirun = ["mpirun.openmpi", "--allow-run-as-root", "--oversubscribe"]
unbound = mpirun + ["--bind-to", "none"] + lmp
bound = mpirun + ["--map-by", "core", "--bind-to", "core"] + lmp
# As huddle preloads it (no time split unless the simmer policy reads it).
preloaded = mpirun + ["--map-by", "core", "--bind-to", "core", "-x", "LD_PRELOAD=" + PMPI,
                      "-x", "HUDDLE_PMPI_TIMESPLIT=0"] + lmp


def huddle(*opts, job=bound):
    return [HUDDLE, "run", "--quiet", *opts, "--"] + job


configs = {
    "os": unbound,
    "compact": bound,
    "compact, PMPI agent preloaded (no huddle)": preloaded,
    "compact, huddle --policy none --source mpi --no-agent": huddle("--policy", "none", "--source", "mpi", "--no-agent"),
    "compact, huddle --policy none --source faults --no-agent": huddle("--policy", "none", "--source", "faults", "--no-agent"),
    "compact, huddle --policy none": huddle("--policy", "none"),
    "huddle": huddle(job=unbound),
}
only = os.environ.get("ABLATE_ONLY")
if only:
    words = [w.strip() for w in only.split(",") if w.strip()]  # an empty word would match all
    # "=NAME" selects the configuration of that name alone ("=huddle": not every "huddle ...").
    picked = lambda k: any(k == w[1:] if w.startswith("=") else w in k for w in words)
    configs = {k: v for k, v in configs.items() if k in ("os", "compact") or picked(k)}
times = {k: [] for k in configs}
for r in range(ROUNDS):
    order = list(configs) if r % 2 == 0 else list(reversed(configs))
    for name in order:
        d = tempfile.mkdtemp()
        t = time.monotonic()
        p = subprocess.run(configs[name], cwd=d, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if p.returncode != 0:
            sys.exit(f"ablate: {name} failed: {p.stderr[-300:]}")
        times[name].append(time.monotonic() - t)
        # Each run as it ends, on stderr (the stage's log): a stage stopped by its time limit
        # still leaves its runs.
        print(f"round {r} {name}: {times[name][-1]:.2f} s", file=sys.stderr, flush=True)
cpu = {}
# ABLATE_KEEP: a directory where each huddle configuration's report of that run is kept.
keep = os.environ.get("ABLATE_KEEP")
if keep:
    os.makedirs(keep, exist_ok=True)
for k, (name, cmd) in enumerate(configs.items()):
    if cmd[0] != HUDDLE:
        continue
    d = tempfile.mkdtemp()
    rep = os.path.join(keep, f"report-{k}") if keep else os.path.join(d, "rep")
    cmd = cmd[:2] + ["--report", rep] + cmd[2:]
    if subprocess.run(cmd, cwd=d, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0:
        info = json.load(open(os.path.join(rep, "run.json")))
        cpu[name] = (info.get("huddle_cpu_s"), info.get("agent_cpu_s"), info.get("target_cpu_s"))
print(f"LAMMPS in.lj, {N} ranks, {STEPS} steps, {ROUNDS} rounds; time / OS time (median of rounds, then each round);"
      " huddle's own CPU and the agent's, from one more run with --report\n")
print("| configuration | median | rounds | median time (s) | huddle CPU (s) | agent CPU (s) | program CPU (s) |")
print("|---|---:|---|---:|---:|---:|---:|")
for name, ts in times.items():
    ratios = [t / o for t, o in zip(ts, times["os"])]
    h, a, p = (f"{x:.2f}" if isinstance(x, (int, float)) else "-" for x in cpu.get(name, (None,) * 3))
    print(f"| {name} | {statistics.median(ratios):.3f} | {', '.join(f'{x:.2f}' for x in ratios)} "
          f"| {statistics.median(ts):.2f} | {h} | {a} | {p} |")
