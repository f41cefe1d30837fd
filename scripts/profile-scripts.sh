#!/usr/bin/env bash
# Redis-side cost of distlock's scripts: 100k pipelined calls of ACQUIRE, then RELEASE, then a
# plain `SET NX PX` for comparison, on a private throwaway redis-server; prints Redis CPU per
# call and `INFO commandstats` per command. Needs redis-server, redis-cli and python3.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 - "$work" <<'PY'
import re, sys
src = open('distlock-core/src/scripts.rs').read()
for name in ['ACQUIRE', 'RELEASE']:
    body = re.search(r'pub const ' + name + r': &str = r#"(.*?)"#;', src, re.S).group(1)
    open(f'{sys.argv[1]}/{name}.lua', 'w').write(body)
PY
cd "$work"
port=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
redis-server --port $port --save "" --appendonly no --daemonize yes --logfile "$work/redis.log" >/dev/null
until redis-cli -p $port PING >/dev/null 2>&1; do sleep 0.05; done
cli="redis-cli -p $port"
A=$($cli SCRIPT LOAD "$(cat ACQUIRE.lua)")
R=$($cli SCRIPT LOAD "$(cat RELEASE.lua)")
N=100000
python3 - "$A" "$R" $N <<'PY'
import sys
a,r,n=sys.argv[1],sys.argv[2],int(sys.argv[3])
def resp(*args):
    out='*%d\r\n'%len(args)
    for x in args:
        x=str(x); out+='$%d\r\n%s\r\n'%(len(x.encode()),x)
    return out
with open('acq.txt','w') as f:
    for i in range(n):
        f.write(resp('EVALSHA',a,2,'distlock:{k%d}'%i,'distlock:{k%d}:fence'%i,'owner','h1',30000,600000))
with open('rel.txt','w') as f:
    for i in range(n):
        f.write(resp('EVALSHA',r,2,'distlock:{k%d}'%i,'distlock:{k%d}:released'%i,'owner','h1'))
with open('setnx.txt','w') as f:
    for i in range(n):
        f.write(resp('SET','s%d'%i,'owner','NX','PX',30000))
PY
for pass in acq rel setnx; do
  $cli CONFIG RESETSTAT >/dev/null
  before=$($cli INFO cpu | awk -F: '/used_cpu_(user|sys):/{s+=$2} END {printf "%.6f", s}')
  $cli --pipe < $pass.txt >/dev/null
  after=$($cli INFO cpu | awk -F: '/used_cpu_(user|sys):/{s+=$2} END {printf "%.6f", s}')
  echo "== $pass: Redis CPU per call $(python3 -c "print(round(($after-$before)/$N*1e6,2))") us (whole server, incl. I/O)"
  $cli INFO commandstats | grep -E "cmdstat_(evalsha|set|hget|hmget|time|hset|pexpire|hlen|del|publish):" | cut -d, -f1-3
done
$cli SHUTDOWN NOSAVE >/dev/null 2>&1 || true
