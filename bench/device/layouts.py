#!/usr/bin/env python3
"""bench/layouts on the device machine: detection accuracy of the real-layout workloads with one
thread per core (LAYOUT_THREADS, default "8 16", on 16 cores, where this 2-PU machine can only
oversubscribe), LAYOUT_ROUNDS runs per row as in bench/layouts/run, and the overhead of
`huddle run` on two of them at LAYOUT_OVERHEAD_THREADS (default 16) threads. LAYOUT_SECONDS
(default 4) and LAYOUT_PAIRS (default 3) as in bench/layouts/run, whose functions this uses."""
import importlib.machinery, importlib.util, os, statistics, sys

os.environ.setdefault("LAYOUT_SECONDS", "4")
os.environ.setdefault("LAYOUT_PAIRS", "3")
threads = [int(t) for t in os.environ.get("LAYOUT_THREADS", "8 16").split()]
overhead_threads = int(os.environ.get("LAYOUT_OVERHEAD_THREADS", "16"))
here = os.path.dirname(os.path.abspath(__file__))
path = os.path.join(here, "..", "layouts", "run")
spec = importlib.util.spec_from_loader("layouts", importlib.machinery.SourceFileLoader("layouts", path))
layouts = importlib.util.module_from_spec(spec)
spec.loader.exec_module(layouts)

print(f"Accuracy: `huddle detect --all-tasks -- layout-X PATTERN --seconds {layouts.SECONDS:g}`, defaults, "
      f"{layouts.ROUNDS} runs per row: r median (min-max), top-1 the lowest, the rest medians\n")
print("| workload | pattern | threads | Pearson r | top-1 | on-pattern | events | pages re-armed | pages found shared |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
for lang in "cf":
    for T in threads:
        for p in layouts.PATTERNS:
            runs = [layouts.accuracy(lang, p, T) for _ in range(layouts.ROUNDS)]
            print(f"| layout-{lang} | {p} | {T} | {layouts.accuracy_cells(runs)} |", flush=True)
print(f"\nOverhead at {overhead_threads} threads: huddle run / plain, {layouts.PAIRS} alternating pairs, "
      "plain/plain control\n")
print("| workload | pattern | iterations | huddle run / plain: median (each) | plain / plain: median (each) | same checksum |")
print("|---|---|---:|---|---|---|")
for lang, p, iters in (("c", "halo", 16000), ("f", "stencil", 8000)):
    r, c, same = layouts.overhead(lang, p, overhead_threads, iters)
    print(f"| layout-{lang} | {p} | {iters} | {statistics.median(r):.3f} ({', '.join(f'{x:.3f}' for x in r)}) | "
          f"{statistics.median(c):.3f} ({', '.join(f'{x:.3f}' for x in c)}) | {layouts.same_checksum(same)} |", flush=True)
