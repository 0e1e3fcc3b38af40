#!/usr/bin/env bash
# Decode rate of `slm run` at 1 and 2 threads while N busy loops compete for the cores
# (as during a build), and on an idle machine with --busy 0. The rounds interleave 1 and
# 2 threads so drifting load from elsewhere hits both alike; prints each run's tok/s, the
# medians and the ratio 2t/1t. The busy loops are this script's children and are killed
# on exit (also on Ctrl-C). Issue 18 section 3: 2 threads must reach >= 0.9x of 1 thread
# under load, and not regress when idle.
#   bench/busy_threads.sh [--slm build/bin/slm] [--model models/nam56r-cpp-14m]
#                         [--busy 6] [--rounds 5] [-n 128] [--threads-b 2]
set -u
slm=build/bin/slm model=models/nam56r-cpp-14m busy=6 rounds=5 ntok=128 tb=2
while [ $# -gt 0 ]; do
  case "$1" in
    --slm) slm=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --busy) busy=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    -n) ntok=$2; shift 2 ;;
    --threads-b) tb=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
pids=()
stop_load() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; }
trap stop_load EXIT
trap 'exit 130' INT TERM
for ((i = 0; i < busy; ++i)); do
  (while :; do :; done) &
  pids+=($!)
done
# tok/s of the generated tokens, from the line slm prints on stderr.
rate() {
  "$slm" run --model "$model" --prompt "int main() {" -n "$ntok" --seed 1 --threads "$1" 2>&1 >/dev/null |
    sed -n 's/.*generated in [0-9.]* s (\([0-9.]*\) tok\/s).*/\1/p'
}
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
a=() b=()
for ((r = 0; r < rounds; ++r)); do
  x=$(rate 1); y=$(rate "$tb")
  a+=("$x"); b+=("$y")
  echo "round $r: 1 thread $x tok/s, $tb threads $y tok/s"
done
ma=$(printf '%s\n' "${a[@]}" | median)
mb=$(printf '%s\n' "${b[@]}" | median)
echo "busy loops $busy, $rounds rounds, -n $ntok: median 1 thread $ma tok/s, $tb threads $mb tok/s, ratio $(awk -v a="$ma" -v b="$mb" 'BEGIN {printf "%.2f", b / a}')"
