#!/usr/bin/env python3
"""Savina's chameneos and big: spindle beside CAF, Go and Erlang, in one command.

  python3 bench/peers/run_savina.py [-t 2,1] [-w chameneos,big] [--repeat 3] [--param W=P ...]
                                    [--spindle PATH] [--also NAME='CMD {w} {p} {t}' ...]
                                    [--build-dir DIR] [--no-build]

Builds the peers (bench/peers/caf_savina.cpp, go/savina.go, erl/savina_bench.erl) into
--build-dir (default $SAVINA_BUILD or /tmp/spindle-savina-build) with the compilers and flags of
../shared/peers/run build, and spindle-bench in build/release (cmake --preset release, target
spindle-bench) unless --spindle names a binary. Then, for each thread count and workload, runs
every implementation --repeat times, interleaved (one run of each in turn, so that the machine's
drift touches all alike), and prints the median, the range, and the ratio of each median to
spindle's (> 1: slower than spindle). A run whose result= is wrong is reported and not counted.

Definitions and default parameters: bench/workloads/savina.hpp. Needs (Debian 12): g++,
libcaf-dev, golang-go, erlang-base (`python3 ../shared/peers/run deps` installs them), cmake and
ninja for spindle. Exits non-zero when any run failed or computed a wrong result.
"""
import argparse
import os
import re
import signal
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DEFAULTS = {"chameneos": 200000, "big": 1000000}
LINE = re.compile(r"^(\S+) (\S+) (\d+) (\d+) ([0-9.]+)(.*)$")


def sh(cmd, **kw):
    print("+", cmd, file=sys.stderr)
    subprocess.run(cmd, shell=True, check=True, **kw)


def build(out, spindle):
    os.makedirs(out, exist_ok=True)
    sh(f"g++ -O2 -std=c++17 -pthread {HERE}/caf_savina.cpp -o {out}/caf_savina -lcaf_core")
    env = dict(os.environ, GOCACHE="/tmp/gocache", GOPATH="/tmp/gopath", GOFLAGS="-mod=mod")
    sh(f"cd {HERE}/go && go build -o {out}/go_savina savina.go", env=env)
    sh(f"erlc -o {out} {HERE}/erl/savina_bench.erl")
    if spindle is None:
        if not os.path.exists(os.path.join(REPO, "build/release/build.ninja")):
            sh(f"cd {REPO} && cmake --preset release")
        sh(f"cd {REPO} && cmake --build build/release --target spindle-bench")


def implementations(out, spindle, also):
    impls = [
        ("spindle", f"{spindle} {{w}} {{p}} {{t}}"),
        ("caf", f"{out}/caf_savina {{w}} {{p}} {{t}}"),
        ("go", f"env GOMAXPROCS={{t}} {out}/go_savina {{w}} {{p}}"),
        ("erlang", f"erl -noshell +P 4000000 +S {{t}}:{{t}} -pa {out} "
                   "-run savina_bench main {w} {p}"),
    ]
    for spec in also:
        name, _, template = spec.partition("=")
        impls.append((name, template))
    return impls


def run_one(cmd, workload, timeout):
    """Seconds, or None and why."""
    proc = subprocess.Popen(cmd, shell=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return None, "timeout"
    for line in out.splitlines():
        m = LINE.match(line.strip())
        if m and m.group(2) == workload:
            if "WRONG" in m.group(6):
                return None, "WRONG " + m.group(6).strip()
            return float(m.group(5)), ""
    return None, f"rc={proc.returncode} no result line {err.strip()[-200:]}"


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-t", default="2,1", help="thread counts, comma-separated")
    ap.add_argument("-w", default="chameneos,big", help="workloads, comma-separated")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--param", action="append", default=[],
                    help="W=P overrides the default parameter")
    ap.add_argument("--spindle", default=None,
                    help="spindle-bench to run (default: build/release's, built)")
    ap.add_argument("--also", action="append", default=[],
                    help="NAME='CMD {w} {p} {t}': one more implementation (another spindle-bench)")
    ap.add_argument("--build-dir",
                    default=os.environ.get("SAVINA_BUILD", "/tmp/spindle-savina-build"))
    ap.add_argument("--no-build", action="store_true", help="use what --build-dir already holds")
    ap.add_argument("--timeout", type=int, default=300)
    args = ap.parse_args()

    params = dict(DEFAULTS)
    for kv in args.param:
        w, _, p = kv.partition("=")
        params[w] = int(p)
    if not args.no_build:
        build(args.build_dir, args.spindle)
    spindle = args.spindle or os.path.join(REPO, "build/release/bench/spindle-bench")
    impls = implementations(args.build_dir, spindle, args.also)

    failed = False
    for threads in [int(t) for t in args.t.split(",")]:
        for workload in args.w.split(","):
            p = params[workload]
            times = {name: [] for name, _ in impls}
            notes = {name: "" for name, _ in impls}
            for _ in range(args.repeat):
                for name, template in impls:
                    command = template.format(w=workload, p=p, t=threads)
                    secs, why = run_one(command, workload, args.timeout)
                    if secs is None:
                        notes[name] = why
                        failed = True
                    else:
                        times[name].append(secs)
            medians = {n: statistics.median(ts) for n, ts in times.items() if ts}
            base = medians.get("spindle")
            print(f"## {workload} {p}, {threads} thread{'s' if threads > 1 else ''} "
                  f"(median of {args.repeat}, interleaved; ratio: time / spindle's)")
            header = ("implementation", "median", "min", "max", "ratio")
            print("  {:16s} {:>10s} {:>10s} {:>10s} {:>8s}".format(*header))
            for name, _ in sorted(impls, key=lambda i: medians.get(i[0], 1e18)):
                ts = times[name]
                if not ts:
                    print(f"  {name:16s} {'-':>10s} {'-':>10s} {'-':>10s} {'-':>8s}  {notes[name]}")
                    continue
                ratio = f"{medians[name] / base:7.2f}x" if base else "-"
                print(f"  {name:16s} {medians[name]:9.4f}s {min(ts):9.4f}s {max(ts):9.4f}s "
                      f"{ratio:>8s}  {notes[name]}")
            sys.stdout.flush()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
