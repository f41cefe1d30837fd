#!/usr/bin/env bash
# Redis-side cost of each lock protocol, side by side: 100k pipelined acquire + release cycles
# of distlock's plain (d2) and fenced acquire, the peers' `SET NX PX` + Lua compare-and-delete,
# a permit of distlock's semaphore, a shared (read) hold, and a Redisson-style hash lock, each on distinct keys of one private throwaway redis-server.
# Also distlock's group commit (32 acquires per ECHO, 32 releases per RELEASE_MANY call, as many
# tasks of one client send them). Prints Redis CPU per acquire + release and the `INFO commandstats` calls behind it.
# Needs redis-server, redis-cli and python3.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 - "$work" <<'PY'
import glob, re, sys
# The scripts' sources: one file per family in wire/scripts/, the preludes in its mod.rs.
src = ''.join(open(f).read() for f in sorted(glob.glob('distlock-core/src/wire/scripts/*.rs')))
# A script made with `concat!(r#"..."#, permit_prelude!(), r#"..."#)` has the prelude's Lua
# functions (`permit_prelude!`, `grant_prelude!`, `fence_prelude!`) where the macro stands.
preludes = dict(re.findall(r'macro_rules! (\w+_prelude) \{\s*\(\) => \{\s*r#"(.*?)"#', src, re.S))
for name in ['ACQUIRE_FENCED', 'RELEASE', 'RELEASE_MANY', 'ACQUIRE_PERMIT', 'ACQUIRE_READ']:
    m = re.search(r'pub const ' + name + r': &str = (concat!\((.*?)\n\);|r#"(.*?)"#;)', src, re.S)
    if m.group(3) is not None:
        body = m.group(3)
    else:
        parts = re.findall(r'r#"(.*?)"#|(\w+_prelude)!\(\)', m.group(2), re.S)
        body = ''.join(preludes[macro] if macro else text for text, macro in parts)
    open(f'{sys.argv[1]}/{name}.lua', 'w').write(body)
bench = open('benches/locks/contenders.rs').read()
for name in ['REDISSON_ACQUIRE', 'REDISSON_RELEASE']:
    body = re.search(r'const ' + name + r': &str = r#"(.*?)"#;', bench, re.S).group(1)
    open(f'{sys.argv[1]}/{name}.lua', 'w').write(body)
# The peers' release: compare and delete (rslock and async-redis-lock ship the same idea).
open(f'{sys.argv[1]}/PEER_RELEASE.lua', 'w').write(
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end")
PY
cd "$work"
port=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
redis-server --port "$port" --save "" --appendonly no --daemonize yes --logfile "$work/redis.log" >/dev/null
until redis-cli -p "$port" PING >/dev/null 2>&1; do sleep 0.05; done
cli="redis-cli -p $port"
declare -A sha
for s in ACQUIRE_FENCED RELEASE RELEASE_MANY REDISSON_ACQUIRE REDISSON_RELEASE PEER_RELEASE ACQUIRE_PERMIT ACQUIRE_READ; do
  sha[$s]=$($cli SCRIPT LOAD "$(cat $s.lua)")
done
N=100000
python3 - "${sha[ACQUIRE_FENCED]}" "${sha[RELEASE]}" "${sha[REDISSON_ACQUIRE]}" "${sha[REDISSON_RELEASE]}" "${sha[PEER_RELEASE]}" $N "${sha[RELEASE_MANY]}" "${sha[ACQUIRE_PERMIT]}" "${sha[ACQUIRE_READ]}" <<'PY'
import sys
fenced, release, racq, rrel, prel, n, many, permit, read = sys.argv[1:10]
n = int(n)
def resp(*args):
    out = '*%d\r\n' % len(args)
    for x in args:
        x = str(x); out += '$%d\r\n%s\r\n' % (len(x.encode()), x)
    return out
with open('d2.txt', 'w') as f:
    for i in range(n):
        k = 'distlock:{p%d}' % i
        f.write(resp('SET', k, 'd2:owner', 'NX', 'PX', 30000, 'GET') + resp('ECHO', 'r1'))
        f.write(resp('EVALSHA', release, 4, k, k + ':released', k + ':queue', k + ':queue:ids', 'd2:owner', 'r2', 0, '-'))
# Group commit (many tasks of one client at once): 32 acquires share one ECHO, 32 releases one
# RELEASE_MANY call. Every release is one server's (its queue's keys given: a lock nobody
# marked is deleted with no queue read and no message).
G = 32
with open('d2grouped.txt', 'w') as f:
    for g in range(n // G):
        keys = ['distlock:{g%d}' % (g * G + j) for j in range(G)]
        f.write(''.join(resp('SET', k, 'd2:owner', 'NX', 'PX', 30000, 'GET') for k in keys) + resp('ECHO', 'g1'))
        args = [x for k in keys for x in (k, k + ':released', k + ':queue', k + ':queue:ids')] + ['g2', '-', 4] + [x for k in keys for x in ('d2:owner', 0, '', 0, '', 0)]
        f.write(resp('EVALSHA', many, 4 * G, *args) + resp('ECHO', 'g2'))
with open('d2fenced.txt', 'w') as f:
    for i in range(n):
        k = 'distlock:{f%d}' % i
        f.write(resp('EVALSHA', fenced, 2, k, k + ':fence', 'd2:owner', 30000, 600000, 'r1'))
        f.write(resp('EVALSHA', release, 4, k, k + ':released', k + ':queue', k + ':queue:ids', 'd2:owner', 'r2', 0, '-'))
# A permit of a semaphore of 5 (one holder at a time here; the others cost a sorted-set entry).
with open('d2permits.txt', 'w') as f:
    for i in range(n):
        k = 'distlock:{s%d}' % i
        f.write(resp('EVALSHA', permit, 2, k, k + ':fence', 'd2:owner', 30000, 5, 0, 'r1'))
        f.write(resp('EVALSHA', release, 4, k, k + ':released', k + ':queue', k + ':queue:ids', 'd2:owner', 'r2', 0, '-'))
# A shared (read) hold (one reader at a time here, no writer waiting).
with open('d2read.txt', 'w') as f:
    for i in range(n):
        k = 'distlock:{r%d}' % i
        f.write(resp('EVALSHA', read, 3, k, k + ':fence', k + ':writer', 'd2:owner', 30000, 0, 'r1'))
        f.write(resp('EVALSHA', release, 4, k, k + ':released', k + ':queue', k + ':queue:ids', 'd2:owner', 'r2', 0, '-'))
with open('peers.txt', 'w') as f:
    for i in range(n):
        k = 'peer%d' % i
        f.write(resp('SET', k, 'owner', 'NX', 'PX', 30000))
        f.write(resp('EVALSHA', prel, 1, k, 'owner'))
with open('redisson.txt', 'w') as f:
    for i in range(n):
        k = 'redisson{%d}' % i
        f.write(resp('EVALSHA', racq, 1, k, 30000, 'owner'))
        f.write(resp('EVALSHA', rrel, 2, k, k + ':released', 30000, 'owner'))
PY
printf '%-34s %s\n' "protocol" "Redis CPU per acquire + release (whole server, incl. I/O)"
for pass in d2 d2grouped d2fenced d2permits d2read peers redisson; do
  $cli CONFIG RESETSTAT >/dev/null
  before=$($cli INFO cpu | awk -F: '/used_cpu_(user|sys):/{s+=$2} END {printf "%.6f", s}')
  $cli --pipe < $pass.txt >/dev/null
  after=$($cli INFO cpu | awk -F: '/used_cpu_(user|sys):/{s+=$2} END {printf "%.6f", s}')
  case $pass in
    d2) label="distlock d2 (SET NX PX GET + ECHO; RELEASE)";;
    d2grouped) label="distlock d2, groups of 32 (one ECHO; RELEASE_MANY)";;
    d2fenced) label="distlock d2 fenced (ACQUIRE_FENCED; RELEASE)";;
    d2permits) label="distlock permit of 5 (ACQUIRE_PERMIT; RELEASE)";;
    d2read) label="distlock read hold (ACQUIRE_READ; RELEASE)";;
    peers) label="peers (SET NX PX; Lua GET/DEL)";;
    redisson) label="Redisson-style (hash scripts)";;
  esac
  printf '%-46s %6s us\n' "$label" "$(python3 -c "print(round(($after-$before)/$N*1e6,2))")"
  $cli INFO commandstats | grep -E "cmdstat_[a-z]+:calls=" | sed 's/^/    /' | cut -d, -f1-3
done
$cli SHUTDOWN NOSAVE >/dev/null 2>&1 || true
