#!/usr/bin/env python3
"""The overhead of `huddle run` on whole programs, on a machine with a core per task: each
program runs as plain, each configuration of OVERHEAD_CONFIGS (comma-separated huddle
command lines, default "huddle run,huddle run --watch always") and plain again (the control),
one run of each per round, the order rotated every round (each configuration takes each
place in the round in turn), OVERHEAD_ROUNDS rounds (default 9). Prints per program the
wall-time ratios to plain's run of the same round, median (min-max) and each, and the CPU
time ratios (the program's, huddle's and the agents', all reaped through wait4).

Why --watch always: on a flat machine (one shared cache, no SMT: the device machine) the
agent goes to sleep after 0.3 s once no more tasks than PUs run; `--watch always` is what it
costs where it keeps watching (a machine with cache domains). Programs: every program in
OVERHEAD_EXTRA first ("NAME=PATH[@THREADS],...", with OMP_NUM_THREADS=THREADS, default
OVERHEAD_THREADS (8); for the NAS Parallel Benchmarks, built by hand, not shipped), then
the real-layout workloads at OVERHEAD_THREADS threads (iterations scaled so that a plain run
takes about OVERHEAD_SECONDS, default 3), and LAMMPS (tests/apps/in.lj, OVERHEAD_RANKS ranks,
default 16, OVERHEAD_LAMMPS_STEPS steps, default 3000) where `lmp` and `mpirun.openmpi` are
there. Output that differs between runs of one program (checksums, verification lines,
thermo rows) is reported. The real-layout workloads also report their main loop's own time
(workload.json's `seconds`, from the first iteration to the last, without the master's
initialisation, thread start-up and exit): its ratio, printed as "loop", tells a cost in the
main loop from one in the start and end."""
import json, os, re, statistics, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HUDDLE = os.path.join(ROOT, "target", "release", "huddle")
ROUNDS = int(os.environ.get("OVERHEAD_ROUNDS", "9"))
SECONDS = float(os.environ.get("OVERHEAD_SECONDS", "3"))
THREADS = int(os.environ.get("OVERHEAD_THREADS", "8"))
RANKS = int(os.environ.get("OVERHEAD_RANKS", "16"))
# OVERHEAD_CONFIGS: the configurations between plain and plain again, comma-separated.
CONFIGS = ("plain", *os.environ.get("OVERHEAD_CONFIGS", "huddle run,huddle run --watch always").split(","),
           "plain again")
HUDDLED = [c for c in CONFIGS if not c.startswith("plain")]


def wrap(config, cmd):
    if config.startswith("plain"):
        return cmd
    return [HUDDLE, "run", "--quiet", *config.split()[2:], "--"] + cmd


def run(cmd, env):
    """Wall seconds, CPU seconds (the process and every descendant it reaped) and stdout."""
    with tempfile.TemporaryFile("w+") as out:
        t = time.monotonic()
        p = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.PIPE, text=True,
                             cwd=tempfile.gettempdir())
        err = p.stderr.read()
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.monotonic() - t
        p.returncode = os.waitstatus_to_exitcode(status)
        if p.returncode != 0:
            sys.exit(f"overhead: {' '.join(cmd)}: exit {p.returncode}: {err.strip()[-300:]}")
        out.seek(0)
        return wall, ru.ru_utime + ru.ru_stime, out.read()


def result_of(text):
    """The lines that must be equal in every run: checksums, verification, thermo rows."""
    keep = []
    for line in text.splitlines():
        if "checksum=" in line:
            keep.append(line.split("checksum=")[-1].strip())
        elif re.match(r"\s*(Verification|VERIFICATION)", line):
            keep.append(" ".join(line.split()))
        elif re.match(r"\s*\d+\s+-?\d+\.\d+", line):  # a LAMMPS thermo row: step and temperature
            keep.append(" ".join(line.split()[:3]))
    return "\n".join(keep)


def programs():
    env = dict(os.environ, OMP_NUM_THREADS=str(THREADS))
    found = []
    for item in filter(None, os.environ.get("OVERHEAD_EXTRA", "").split(",")):
        name, _, path = item.partition("=")
        path, _, threads = path.partition("@")
        threads = threads or str(THREADS)
        found.append((f"{name}, {threads} threads", [path], dict(env, OMP_NUM_THREADS=threads), None))
    for lang, pattern in (("c", "halo"), ("f", "stencil")):
        prog = os.path.join(ROOT, "build", "layouts", "layout-" + lang)
        if not os.access(prog, os.X_OK):
            print(f"overhead: {prog} missing (make build-layouts)", file=sys.stderr)
            continue
        # Scale the iterations so that a plain run takes about SECONDS.
        probe = 200
        wall, _, _ = run([prog, pattern, "--iterations", str(probe)], env)
        iters = max(probe, int(probe * SECONDS / max(wall, 1e-3)))
        loop_dir = tempfile.mkdtemp(prefix="overhead-loop-")
        found.append((f"layout-{lang} {pattern}, {THREADS} threads, {iters} iterations",
                      [prog, pattern, "--iterations", str(iters), "--out-dir", loop_dir], env,
                      os.path.join(loop_dir, "workload.json")))
    if subprocess.run(["sh", "-c", "command -v lmp && command -v mpirun.openmpi"],
                      capture_output=True).returncode == 0:
        px = {2: 2, 4: 2, 8: 4, 16: 4}.get(RANKS, 1)
        steps = os.environ.get("OVERHEAD_LAMMPS_STEPS", "3000")
        found.append((f"LAMMPS in.lj, {RANKS} ranks, {steps} steps, `mpirun --bind-to none`",
                      ["mpirun.openmpi", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
                       "-np", str(RANKS), "lmp", "-in", os.path.join(ROOT, "tests", "apps", "in.lj"),
                       "-var", "px", str(px), "-var", "py", str(RANKS // px), "-var", "nsteps", steps,
                       "-log", "none"], dict(os.environ), None))
    return found


def cells(xs):
    return f"{statistics.median(xs):.3f} ({min(xs):.3f}-{max(xs):.3f})"


def main():
    print(f"Overhead: {ROUNDS} rounds, each configuration once a round, the order rotated; "
          "ratio = time / plain's time in the same round, median (min-max); CPU = all CPU time "
          f"reaped (program, huddle, agents) / plain's. Machine: {os.cpu_count()} CPUs, "
          f"kernel {os.uname().release}\n")
    print("| program | plain median (s) | " + " | ".join(CONFIGS[1:]) + " | CPU: " +
          " | CPU: ".join(HUDDLED) + " | same output |")
    print("|---|---:|" + "---|" * (len(CONFIGS) + len(HUDDLED)))
    loops = []
    for name, cmd, env, loop_file in programs():
        wall = {c: [] for c in CONFIGS}
        loop = {c: [] for c in CONFIGS}
        cpu = {c: [] for c in CONFIGS}
        outputs = {}
        run(cmd, env)  # warm the page cache, untimed
        for r in range(ROUNDS):
            order = CONFIGS[r % len(CONFIGS):] + CONFIGS[:r % len(CONFIGS)]
            for c in order:
                w, u, text = run(wrap(c, cmd), env)
                wall[c].append(w)
                cpu[c].append(u)
                if loop_file:
                    with open(loop_file) as f:
                        loop[c].append(json.load(f)["seconds"])
                    os.unlink(loop_file)
                outputs.setdefault(result_of(text), []).append(f"{c} {r}")
            print(f"{name} round {r}: " + ", ".join(f"{c} {wall[c][-1]:.3f}s/{cpu[c][-1]:.2f}cpu"
                                                    for c in CONFIGS), file=sys.stderr, flush=True)
        ratio = {c: [w / p for w, p in zip(wall[c], wall["plain"])] for c in CONFIGS}
        cpu_ratio = {c: [x / p for x, p in zip(cpu[c], cpu["plain"])] for c in CONFIGS}
        same = "yes" if len(outputs) == 1 else "NO: " + "; ".join(", ".join(v) for v in outputs.values())
        print(f"| {name} | {statistics.median(wall['plain']):.3f} | " +
              " | ".join(cells(ratio[c]) for c in CONFIGS[1:]) + " | " +
              " | ".join(cells(cpu_ratio[c]) for c in HUDDLED) + f" | {same} |", flush=True)
        for c in CONFIGS[1:]:
            print(f"  - {c}: " + ", ".join(f"{x:.3f}" for x in ratio[c]), flush=True)
        if loop_file:
            loop_ratio = {c: [x / p for x, p in zip(loop[c], loop["plain"])] for c in CONFIGS}
            outside = {c: [w - x for w, x in zip(wall[c], loop[c])] for c in CONFIGS}
            loops.append(f"| {name} | {statistics.median(loop['plain']):.3f} | " +
                         " | ".join(cells(loop_ratio[c]) for c in CONFIGS[1:]) + " | " +
                         " | ".join(f"{statistics.median(outside[c]) * 1e3:.0f}" for c in CONFIGS) +
                         " |")
    if loops:
        print("\nThe main loop alone (workload.json's seconds): its time over plain's, median "
              "(min-max), and the median of the rest of each run (wall - loop: initialisation, "
              "start-up, exit), ms:\n")
        print("| program | plain loop (s) | " + " | ".join(CONFIGS[1:]) + " | rest: " +
              " | rest: ".join(CONFIGS) + " |")
        print("|---|---:|" + "---|" * (2 * len(CONFIGS) - 1))
        print("\n".join(loops), flush=True)


if __name__ == "__main__":
    main()
