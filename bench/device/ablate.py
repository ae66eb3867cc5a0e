#!/usr/bin/env python3
"""Where huddle's time goes on a fully subscribed MPI job: LAMMPS (tests/apps/in.lj) with
ABLATE_RANKS ranks (default 16), each configuration in alternating order over ABLATE_ROUNDS
rounds (default 5); prints time / the OS's (`--bind-to none`) time per configuration."""
import os, statistics, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HUDDLE = os.path.join(ROOT, "target", "release", "huddle")
N = int(os.environ.get("ABLATE_RANKS", "16"))
ROUNDS = int(os.environ.get("ABLATE_ROUNDS", "3"))
STEPS = os.environ.get("ABLATE_STEPS", "12000")
px = {2: 2, 4: 2, 8: 4, 16: 4}[N]
lmp = ["-np", str(N), "lmp", "-in", os.path.join(ROOT, "tests", "apps", "in.lj"), "-var", "px", str(px),
       "-var", "py", str(N // px), "-var", "nsteps", STEPS, "-log", "none", "-screen", "none"]
mpirun = ["mpirun.openmpi", "--allow-run-as-root", "--oversubscribe"]
unbound = mpirun + ["--bind-to", "none"] + lmp
bound = mpirun + ["--map-by", "core", "--bind-to", "core"] + lmp
configs = {
    "os": unbound,
    "compact": bound,
    "huddle": [HUDDLE, "run", "--quiet", "--"] + unbound,
    "huddle --policy none": [HUDDLE, "run", "--quiet", "--policy", "none", "--"] + unbound,
    "huddle --no-agent --source mpi": [HUDDLE, "run", "--quiet", "--no-agent", "--source", "mpi", "--"] + unbound,
    "huddle --policy none, compact": [HUDDLE, "run", "--quiet", "--policy", "none", "--"] + bound,
}
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
print(f"LAMMPS in.lj, {N} ranks, {STEPS} steps, {ROUNDS} rounds; time / OS time (median of rounds, then each round)\n")
print("| configuration | median | rounds | median time (s) |\n|---|---:|---|---:|")
for name, ts in times.items():
    ratios = [t / o for t, o in zip(ts, times["os"])]
    print(f"| {name} | {statistics.median(ratios):.3f} | {', '.join(f'{x:.2f}' for x in ratios)} | {statistics.median(ts):.2f} |")
