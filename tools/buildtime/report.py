#!/usr/bin/env python3
"""Build and test time of a CI run, as tables (bench/README.md, "Build and test time").

Reads, for each build directory given, Ninja's log (.ninja_log: what each build step took)
and ctest's log of the last run (Testing/Temporary/LastTest.log: what each test took),
and prints Markdown: the build time per target (compile steps summed per target, in CPU
seconds of one core), the slowest steps, and the test time per ctest test. Nested builds
that ctest drives (the AArch64 cross build, the consumer's add_subdirectory build) have
their own build directories inside the outer one and are reported too when their
.ninja_log exists.

    python3 tools/buildtime/report.py build build-asan [--top 10]

Standard library only (and the ninja binary, to skip steps of targets since removed).
"""
import argparse
import collections
import os
import re
import subprocess
import sys


def current_outputs(build_dir):
    """The outputs of the build graph as configured now (None if ninja cannot say), so
    that steps of targets since removed are not counted."""
    try:
        out = subprocess.run(["ninja", "-C", build_dir, "-t", "targets", "all"], capture_output=True,
                             text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return {line.split(":")[0] for line in out.splitlines() if ":" in line}


def ninja_steps(build_dir):
    """{output: seconds}: the newest record of every step in build_dir/.ninja_log whose
    output is still part of the build."""
    path = os.path.join(build_dir, ".ninja_log")
    steps = {}
    if not os.path.exists(path):
        return steps
    with open(path) as f:
        for line in f:
            if line.startswith("#"):
                continue
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 4:
                continue
            start, end, out = int(parts[0]), int(parts[1]), parts[3]
            steps[out] = (end - start) / 1000.0  # a later entry for the same output wins
    live = current_outputs(build_dir)
    if live is not None:
        steps = {o: t for o, t in steps.items() if o in live or os.path.join(build_dir, o) in live}
    return steps


def target_of(output):
    """The CMake target a Ninja output belongs to (object files: the .dir they sit in)."""
    m = re.search(r"CMakeFiles/([^/]+)\.dir/", output)
    if m:
        return m.group(1)
    base = os.path.basename(output)
    if base.endswith("_tests.cmake"):
        return re.sub(r"\[\d+\]_tests\.cmake$", "", base) + " (test discovery)"
    return base


def ctest_times(build_dir):
    """[(name, seconds, passed)] from build_dir/Testing/Temporary/LastTest.log."""
    path = os.path.join(build_dir, "Testing", "Temporary", "LastTest.log")
    out = []
    if not os.path.exists(path):
        return out
    name = None
    with open(path, errors="replace") as f:
        for line in f:
            m = re.match(r'^\d+/\d+ Test: (.*)$', line)
            if m:
                name = m.group(1).strip()
                continue
            m = re.match(r'^"(.*)" end time:', line)
            m2 = re.match(r'^Test time = +([0-9.]+) sec', line)
            if m2 and name is not None:
                out.append([name, float(m2.group(1)), None])
            m3 = re.match(r'^Test (Passed|Failed)', line)
            if m3 and out and out[-1][2] is None:
                out[-1][2] = m3.group(1) == "Passed"
    return out


def report(build_dir, top):
    print(f"### {build_dir}\n")
    steps = ninja_steps(build_dir)
    if steps:
        per_target = collections.Counter()
        for out, s in steps.items():
            per_target[target_of(out)] += s
        total = sum(steps.values())
        print(f"Build: {len(steps)} steps, {total:.0f} s summed over steps (wall time of each; steps run in parallel).\n")
        print("| target | s (steps, wall) | share |\n|---|---|---|")
        for t, s in per_target.most_common(top):
            print(f"| {t} | {s:.1f} | {100 * s / total:.0f} % |")
        print(f"\nSlowest {top} steps:\n\n| step | s |\n|---|---|")
        for out, s in sorted(steps.items(), key=lambda kv: -kv[1])[:top]:
            print(f"| {out} | {s:.1f} |")
        print()
    tests = ctest_times(build_dir)
    if tests:
        total = sum(t[1] for t in tests)
        failed = sum(1 for t in tests if t[2] is False)
        print(f"Tests: {len(tests)}, {failed} failed, {total:.0f} s summed over tests.\n")
        print("| test | s |\n|---|---|")
        for name, s, _ in sorted(tests, key=lambda t: -t[1])[:top]:
            print(f"| {name} | {s:.1f} |")
        print()
    for nested in ("cross-aarch64", "consumer/subdirectory"):
        d = os.path.join(build_dir, nested)
        if os.path.exists(os.path.join(d, ".ninja_log")):
            report(d, top)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("build_dirs", nargs="+")
    ap.add_argument("--top", type=int, default=10)
    a = ap.parse_args()
    for d in a.build_dirs:
        if not os.path.isdir(d):
            print(f"report.py: no directory {d}", file=sys.stderr)
            return 1
        report(d, a.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
