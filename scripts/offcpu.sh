#!/usr/bin/env bash
# Where a B2 cycle waits, per thread: 64 tasks (BENCH_PROFILE_TASKS) of one contender at a time
# (the bench's profile mode, one private redis-server), recorded with `perf sched record`, and
# each thread's time split into running, sleeping (off-CPU with nothing to do: a worker parked,
# Redis waiting for input) and runnable but waiting for a core (sch delay), per cycle, with its
# wake-ups per cycle and the cores' idle time per cycle. Prints one Markdown table.
#
# Usage: scripts/offcpu.sh [contender...]   (default: manual run rslock; see BENCH_PROFILE)
# Environment: TASKS (64), CYCLES per task (4000), BENCH (a bench binary to use instead of
# building this tree's: another commit's, for a before/after). Needs perf with scheduler tracepoints
# (root, or kernel.perf_event_paranoid <= 1) and python3; builds the bench if needed.
set -euo pipefail
cd "$(dirname "$0")/.."
tasks=${TASKS:-64}
cycles=${CYCLES:-4000}
contenders=("$@")
[ ${#contenders[@]} -gt 0 ] || contenders=(manual run rslock)
bench=${BENCH:-$(cargo bench --bench locks --no-run --message-format=json 2>/dev/null |
  grep -o '"executable":"[^"]*locks-[^"]*"' | cut -d'"' -f4 | tail -1)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "| contender | cycles/s | thread | run µs | sleep µs | runnable µs | wake-ups |"
echo "| --- | ---: | --- | ---: | ---: | ---: | ---: |"
for who in "${contenders[@]}"; do
  BENCH_PROFILE=$who BENCH_PROFILE_TASKS=$tasks BENCH_PROFILE_CYCLES=$cycles \
    perf sched record -k CLOCK_MONOTONIC -q -o "$work/$who.data" -- "$bench" 2>"$work/$who.log" >/dev/null
  rate=$(grep -o '([0-9]* cycles/s)' "$work/$who.log" | tr -dc 0-9)
  perf sched timehist -i "$work/$who.data" 2>/dev/null >"$work/$who.txt"
  window=$(grep -o 'profile window: .*' "$work/$who.log")
  python3 - "$who" "$rate" "$((tasks * cycles))" "$work/$who.txt" "$window" <<'PY'
import re, sys
who, rate, cycles, path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
# The measured cycles' window, as the bench printed its `Instant`s (CLOCK_MONOTONIC, the
# trace's clock).
ends = [int(s) + int(ns) / 1e9 for s, ns in re.findall(r'tv_sec: (\d+), tv_nsec: (\d+)', sys.argv[5])]
start, end = ends
# Threads by role: the runtime's workers, Redis's main thread, the client's own thread, idle.
roles = [('tokio workers', r'^tokio-rt-worker'), ('redis-server', r'^redis-server\['),
         ('client thread', r'^distlock-client'), ('idle (both cores)', r'^<idle>')]
sums = {name: [0.0, 0.0, 0.0, 0] for name, _ in roles}
for line in open(path):
    m = re.match(r'\s*([\d.]+)\s+\[\d+\]\s+(\S.*?)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$', line)
    if not m:
        continue
    at, task = float(m.group(1)), m.group(2)
    wait, delay, run = float(m.group(3)), float(m.group(4)), float(m.group(5))
    # A slice is counted when it ends inside the window (one slice across an edge at most).
    if not start < at <= end:
        continue
    for name, pattern in roles:
        if re.match(pattern, task):
            s = sums[name]
            s[0] += run; s[1] += wait; s[2] += delay; s[3] += 1
            break
us = 1000.0 / cycles  # ms in total -> µs per cycle
first = True
for name, _ in roles:
    run, wait, delay, n = sums[name]
    if name.startswith('idle'):
        cells = (f'{run * us:.2f}', '', '', '')
    else:
        cells = (f'{run * us:.2f}', f'{wait * us:.2f}', f'{delay * us:.2f}', f'{n / cycles:.2f}')
    label = f'{who} | {rate:,}' if first else ' | '
    print(f'| {label} | {name} | ' + ' | '.join(cells) + ' |')
    first = False
PY
done
