//! The real scripts held to the model: a seeded stream of operations drives a real
//! `redis-server` (on a frozen clock the test moves: `frozen_clock.c`) and the model's scripts
//! (`distlock_model::scripts`) side by side, and after every step compares the reply, every
//! message published and every key (type, value, expiry). A disagreement is shrunk to the
//! shortest sequence that still disagrees and printed with its seed, so it replays:
//! `DISTLOCK_MODEL_SEED=<seed> cargo test -p distlock-model --test conformance`.
//!
//! `DISTLOCK_MODEL_OPS` sets how many operations run (default [`CI_OPS`]); `scripts/model.sh`
//! runs more.
//!
//! Also here: every script of `distlock::scripts` is modelled (a new one fails until it is),
//! and each script's text is the one the model was written against (its SHA1, as Redis
//! computes it, recorded in `distlock-model/src/scripts/digests.txt`): a script changed
//! without its model fails, even where the random operations would not reach the change.

mod ops;
mod resp;
mod server;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use distlock_model::keyspace::{Keyspace, Redis, Value};
use distlock_model::scripts::{self, Mutations, Reply, COVERED};

use ops::{Gen, Op};
use resp::{Conn, Resp};
use server::FrozenServer;

/// Operations per CI run.
const CI_OPS: u64 = 40_000;
/// Operations per run from an empty keyspace (a seed each): short runs shrink and replay fast.
const RUN_OPS: u64 = 400;
/// Where the clocks start: 2023-11-14, µs.
const START_US: i64 = 1_700_000_000_000_000;
/// The longest a shrink may take.
const SHRINK_FOR: Duration = Duration::from_secs(90);

/// The Lua source of a covered script.
fn source(name: &str) -> &'static str {
    use distlock::scripts as s;
    match name {
        "ACQUIRE_FENCED" => s::ACQUIRE_FENCED,
        "RELEASE" => s::RELEASE,
        "RELEASE_MANY" => s::RELEASE_MANY,
        "RENEW" => s::RENEW,
        "ACQUIRE_HANDED" => s::ACQUIRE_HANDED,
        "LEAVE_QUEUE" => s::LEAVE_QUEUE,
        "ACQUIRE_QUEUED" => s::ACQUIRE_QUEUED,
        "FENCE_FLOOR" => s::FENCE_FLOOR,
        "ACQUIRE_PERMIT" => s::ACQUIRE_PERMIT,
        "ACQUIRE_READ" => s::ACQUIRE_READ,
        "ACQUIRE_WRITE" => s::ACQUIRE_WRITE,
        "ACQUIRE_ALL" => s::ACQUIRE_ALL,
        "LEADER_PROCLAIM" => s::LEADER_PROCLAIM,
        "LEADER_CURRENT" => s::LEADER_CURRENT,
        "LEADER_CANDIDATE" => s::LEADER_CANDIDATE,
        "LEADER_CANDIDATES" => s::LEADER_CANDIDATES,
        "FENCED_WRITE" => s::FENCED_WRITE,
        "CLIENT_RECORD" => s::CLIENT_RECORD,
        other => panic!("no source for {other}: add it here and to the model"),
    }
}

/// The real server, its connections and the scripts' SHA1s.
struct Real {
    server: FrozenServer,
    conn: Conn,
    sub: Conn,
    shas: BTreeMap<&'static str, String>,
}

impl Real {
    fn start() -> Real {
        let server = FrozenServer::start(START_US);
        let port = server.server.port();
        let mut conn = Conn::connect(port);
        FrozenServer::no_active_expiry(&mut conn);
        let mut shas = BTreeMap::new();
        for name in COVERED {
            match conn.call(&["SCRIPT", "LOAD", source(name)]) {
                Resp::Bulk(sha) => shas.insert(*name, sha),
                other => panic!("SCRIPT LOAD {name}: {other:?}"),
            };
        }
        let mut sub = Conn::connect(port);
        let mut cmds = vec![vec!["PSUBSCRIBE".to_owned(), "*".to_owned()]];
        cmds.push(
            std::iter::once("SSUBSCRIBE".to_owned())
                .chain(ops::channels())
                .collect(),
        );
        sub.send(&cmds);
        for _ in 0..1 + ops::channels().len() {
            sub.read();
        }
        Real {
            server,
            conn,
            sub,
            shas,
        }
    }

    /// The messages published since the last call, in order (a `PING` on the subscriber is
    /// the barrier: its reply comes after every message sent before it).
    fn messages(&mut self) -> Vec<(String, String)> {
        self.sub.send(&[vec!["PING".to_owned()]]);
        let mut out = Vec::new();
        loop {
            match self.sub.read() {
                Resp::Array(items) => match items.as_slice() {
                    [Resp::Bulk(k), _, Resp::Bulk(c), Resp::Bulk(m)] if k == "pmessage" => {
                        out.push((c.clone(), m.clone()))
                    }
                    [Resp::Bulk(k), Resp::Bulk(c), Resp::Bulk(m)] if k == "smessage" => {
                        out.push((c.clone(), m.clone()))
                    }
                    [Resp::Bulk(k), ..] if k == "pong" => return out,
                    other => panic!("unexpected on the subscriber: {other:?}"),
                },
                other => panic!("unexpected on the subscriber: {other:?}"),
            }
        }
    }

    /// Every key: type, content (normalized) and PTTL.
    fn dump(&mut self) -> Dump {
        let Resp::Array(keys) = self.conn.call(&["KEYS", "*"]) else {
            panic!("KEYS *");
        };
        let keys: Vec<String> = keys
            .into_iter()
            .map(|k| match k {
                Resp::Bulk(k) => k,
                other => panic!("a key: {other:?}"),
            })
            .collect();
        let meta = self.conn.pipeline(
            &keys
                .iter()
                .flat_map(|k| {
                    [
                        vec!["TYPE".into(), k.clone()],
                        vec!["PTTL".into(), k.clone()],
                    ]
                })
                .collect::<Vec<_>>(),
        );
        let types: Vec<String> = meta
            .iter()
            .step_by(2)
            .map(|t| match t {
                Resp::Simple(t) => t.clone(),
                other => panic!("TYPE: {other:?}"),
            })
            .collect();
        let content_cmds: Vec<Vec<String>> = keys
            .iter()
            .zip(&types)
            .map(|(k, t)| {
                let k = k.clone();
                match t.as_str() {
                    "string" => vec!["GET".into(), k],
                    "zset" => vec![
                        "ZRANGE".into(),
                        k,
                        "0".into(),
                        "-1".into(),
                        "WITHSCORES".into(),
                    ],
                    "hash" => vec!["HGETALL".into(), k],
                    "list" => vec!["LRANGE".into(), k, "0".into(), "-1".into()],
                    other => panic!("a key of type {other}"),
                }
            })
            .collect();
        let contents = self.conn.pipeline(&content_cmds);
        let mut dump = Dump::new();
        for (i, key) in keys.into_iter().enumerate() {
            let pttl = match &meta[2 * i + 1] {
                Resp::Int(n) => *n,
                other => panic!("PTTL: {other:?}"),
            };
            let items: Vec<String> = match &contents[i] {
                Resp::Bulk(s) => vec![s.clone()],
                Resp::Array(a) => a
                    .iter()
                    .map(|x| match x {
                        Resp::Bulk(s) => s.clone(),
                        other => panic!("an item: {other:?}"),
                    })
                    .collect(),
                other => panic!("content of {key}: {other:?}"),
            };
            let content = match types[i].as_str() {
                "zset" => items
                    .chunks(2)
                    .map(|p| format!("{} {}", p[0], score(&p[1])))
                    .collect(),
                "hash" => {
                    let mut pairs: Vec<String> = items
                        .chunks(2)
                        .map(|p| format!("{}={}", p[0], p[1]))
                        .collect();
                    pairs.sort();
                    pairs
                }
                _ => items,
            };
            dump.insert(key, (types[i].clone(), content, pttl));
        }
        dump
    }
}

/// A score as Redis prints it (`%.17g`), read back as the integer every script writes.
fn score(s: &str) -> String {
    match s.parse::<f64>() {
        Ok(f) if f.fract() == 0.0 && f.abs() < 9e15 => format!("{}", f as i64),
        _ => format!("non-integer:{s}"),
    }
}

/// Key → (type, content, pttl).
type Dump = BTreeMap<String, (String, Vec<String>, i64)>;

fn model_dump(ks: &Keyspace, now_ms: i64) -> Dump {
    ks.live(now_ms)
        .map(|(k, e)| {
            let content = match &e.value {
                Value::Str(s) => vec![s.clone()],
                Value::ZSet(z) => {
                    let mut all: Vec<(&String, &i64)> = z.iter().collect();
                    all.sort_by(|a, b| a.1.cmp(b.1).then_with(|| a.0.cmp(b.0)));
                    all.into_iter().map(|(m, s)| format!("{m} {s}")).collect()
                }
                Value::Hash(h) => {
                    // Sorted as Redis's pairs are (a field that is a prefix of another,
                    // `d2:c1` and `d2:c1+`, sorts apart from its pair).
                    let mut pairs: Vec<String> =
                        h.iter().map(|(f, v)| format!("{f}={v}")).collect();
                    pairs.sort();
                    pairs
                }
                Value::List(l) => l.clone(),
            };
            let pttl = e.expires_at.map_or(-1, |at| (at - now_ms).max(0));
            (k.clone(), (e.value.type_name().to_owned(), content, pttl))
        })
        .collect()
}

fn to_reply(r: Resp) -> Reply {
    match r {
        Resp::Nil => Reply::Nil,
        Resp::Int(n) => Reply::Int(n),
        Resp::Bulk(s) | Resp::Simple(s) => Reply::Bulk(s),
        Resp::Array(a) => Reply::Array(a.into_iter().map(to_reply).collect()),
        Resp::Error(e) => Reply::Error(e),
    }
}

/// Replies compared as Redis would mean them: the model's stand-in for a Lua runtime error
/// matches any error; a hash's pairs (`LEADER_CANDIDATES`) in any order.
fn same(script: &str, model: &Reply, real: &Reply) -> bool {
    match (model, real) {
        (Reply::Error(m), Reply::Error(_)) if m == "ERR script error" => true,
        _ if script == "LEADER_CANDIDATES" => normalize_pairs(model) == normalize_pairs(real),
        _ => model == real,
    }
}

fn normalize_pairs(r: &Reply) -> Reply {
    let mut r = r.clone();
    if let Reply::Array(top) = &mut r {
        if let Some(Reply::Array(inner)) = top.get_mut(1) {
            if let Some(Reply::Array(pairs)) = inner.get_mut(2) {
                let mut chunks: Vec<Vec<Reply>> = pairs.chunks(2).map(|c| c.to_vec()).collect();
                chunks.sort_by_key(|c| format!("{c:?}"));
                *pairs = chunks.concat();
            }
        }
    }
    r
}

/// The model's side: its keyspace and the clock both run on.
struct Model {
    ks: Keyspace,
    now_us: i64,
}

/// What one step did, for the coverage count: the script and its status.
type Seen = (&'static str, String);

/// Runs `op` on both and compares; `Err` describes the first difference.
fn step(real: &mut Real, model: &mut Model, op: &Op) -> Result<Option<Seen>, String> {
    let (real_reply, model_reply, script, published) = match op {
        Op::Clock { us } => {
            model.now_us += us;
            real.server.set(model.now_us);
            return Ok(None);
        }
        Op::Del { key } => {
            let got = to_reply(real.conn.call(&["DEL", key]));
            let mut r = Redis::new(&mut model.ks, model.now_us);
            (got, Reply::Int(r.del(key)), "DEL", Vec::new())
        }
        Op::Foreign { key, px } => {
            let got = to_reply(
                real.conn
                    .call(&["SET", key, "x:foreign", "PX", &px.to_string()]),
            );
            let mut r = Redis::new(&mut model.ks, model.now_us);
            r.set(key, "x:foreign", Some(*px));
            (got, Reply::Bulk("OK".into()), "SET", Vec::new())
        }
        Op::Eval { script, keys, argv } => {
            let got = if *script == "SET_NX_GET" {
                let cmd = ["SET", &keys[0], &argv[0], "NX", "PX", &argv[1], "GET"];
                real.conn.call(&cmd)
            } else {
                let nkeys = keys.len().to_string();
                let mut cmd: Vec<&str> = vec!["EVALSHA", &real.shas[script], &nkeys];
                cmd.extend(keys.iter().map(String::as_str));
                cmd.extend(argv.iter().map(String::as_str));
                real.conn.call(&cmd)
            };
            let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
            let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
            let ran = scripts::run(
                script,
                &mut model.ks,
                model.now_us,
                &keys,
                &argv,
                &Mutations::default(),
            );
            (to_reply(got), ran.reply, *script, ran.published)
        }
    };
    if !same(script, &model_reply, &real_reply) {
        return Err(format!(
            "reply differs:\n  redis: {real_reply:?}\n  model: {model_reply:?}"
        ));
    }
    let messages = real.messages();
    if messages != published {
        return Err(format!(
            "messages differ:\n  redis: {messages:?}\n  model: {published:?}"
        ));
    }
    let (got, want) = (
        real.dump(),
        model_dump(&model.ks, model.now_us.div_euclid(1000)),
    );
    if got != want {
        let keys: BTreeSet<&String> = got.keys().chain(want.keys()).collect();
        let diff: Vec<String> = keys
            .into_iter()
            .filter(|k| got.get(*k) != want.get(*k))
            .map(|k| {
                format!(
                    "  {k}:\n    redis: {:?}\n    model: {:?}",
                    got.get(k),
                    want.get(k)
                )
            })
            .collect();
        return Err(format!("keys differ:\n{}", diff.join("\n")));
    }
    let status = match &model_reply {
        Reply::Array(a) => match a.get(1) {
            Some(Reply::Array(inner)) => format!("{:?}", inner.first()),
            Some(Reply::Int(n)) if n.abs() > 1000 => "a token".into(),
            Some(other) => format!("{other:?}"),
            None => "?".into(),
        },
        Reply::Error(e) => e.split(' ').next().unwrap_or("").to_owned(),
        other => format!("{other:?}"),
    };
    Ok(Some((script, status)))
}

/// Both sides back to an empty keyspace at the start time.
fn reset(real: &mut Real) -> Model {
    real.server.set(START_US);
    assert_eq!(real.conn.call(&["FLUSHALL"]), Resp::Simple("OK".into()));
    real.messages();
    Model {
        ks: Keyspace::new(),
        now_us: START_US,
    }
}

/// Replays `ops` from empty; the step that disagrees first and why.
fn replay(real: &mut Real, ops: &[Op]) -> Option<(usize, String)> {
    let mut model = reset(real);
    for (i, op) in ops.iter().enumerate() {
        if let Err(why) = step(real, &mut model, op) {
            return Some((i, why));
        }
    }
    None
}

/// The shortest sequence found (by removing chunks, then single steps) that still disagrees.
fn shrink(real: &mut Real, mut ops: Vec<Op>) -> Vec<Op> {
    let started = Instant::now();
    let mut chunk = ops.len() / 2;
    while chunk >= 1 && started.elapsed() < SHRINK_FOR {
        let mut at = 0;
        let mut removed_any = false;
        while at < ops.len() && started.elapsed() < SHRINK_FOR {
            let mut candidate = ops.clone();
            candidate.drain(at..(at + chunk).min(ops.len()));
            match replay(real, &candidate) {
                Some((i, _)) => {
                    candidate.truncate(i + 1);
                    ops = candidate;
                    removed_any = true;
                }
                None => at += chunk,
            }
        }
        if !removed_any {
            chunk /= 2;
        }
    }
    ops
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{name}={v}: not a number"))
    })
}

#[test]
fn the_real_scripts_do_what_the_model_does() {
    let total = env_u64("DISTLOCK_MODEL_OPS").unwrap_or(CI_OPS);
    let only = env_u64("DISTLOCK_MODEL_SEED");
    let mut real = Real::start();
    let mut seen: BTreeMap<Seen, u64> = BTreeMap::new();
    let started = Instant::now();
    let runs = only.map_or(total.div_ceil(RUN_OPS), |_| 1);
    let mut ran = 0u64;
    for run in 0..runs {
        let seed = only.unwrap_or(0xD157_10C0 + run);
        let mut gen = Gen::new(seed);
        let mut model = reset(&mut real);
        let mut done: Vec<Op> = Vec::new();
        for _ in 0..RUN_OPS {
            let op = gen.op(&model.ks, model.now_us);
            done.push(op.clone());
            match step(&mut real, &mut model, &op) {
                Ok(Some(s)) => *seen.entry(s).or_default() += 1,
                Ok(None) => {}
                Err(why) => {
                    eprintln!(
                        "seed {seed}: step {} disagrees: {why}\nshrinking...",
                        done.len()
                    );
                    let short = shrink(&mut real, done);
                    let (_, why) =
                        replay(&mut real, &short).expect("the shrunk sequence disagrees");
                    let steps: Vec<String> = short
                        .iter()
                        .enumerate()
                        .map(|(i, op)| format!("  {}. {op}", i + 1))
                        .collect();
                    panic!(
                        "the real scripts and the model disagree (seed {seed}; replay with \
                         DISTLOCK_MODEL_SEED={seed} cargo test -p distlock-model --test conformance)\n\
                         shortest sequence found ({} steps, from an empty keyspace at {START_US} us):\n{}\n{why}",
                        short.len(),
                        steps.join("\n")
                    );
                }
            }
            ran += 1;
        }
    }
    eprintln!(
        "conformance: {ran} operations, 0 disagreements, {:.1?}",
        started.elapsed()
    );
    let mut by_script: BTreeMap<&str, u64> = BTreeMap::new();
    for ((script, status), n) in &seen {
        eprintln!("  {script} {status}: {n}");
        *by_script.entry(script).or_default() += n;
    }
    for name in COVERED.iter().chain(&["SET_NX_GET"]) {
        let n = by_script.get(name).copied().unwrap_or(0);
        assert!(
            only.is_some() || n >= 20,
            "{name} ran {n} times: the generator must reach every script"
        );
    }
}

/// The names `distlock-core/src/wire/scripts/mod.rs` exports (`pub use ...`), less the
/// constants that are no script.
fn exported_scripts() -> BTreeSet<String> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../distlock-core/src/wire/scripts/mod.rs"
    );
    let text = std::fs::read_to_string(path).expect("read the scripts' module");
    let mut names = BTreeSet::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("\npub use ") {
        let tail = &rest[at + 9..];
        let end = tail.find(';').expect("a `pub use` ends");
        let item = &tail[..end];
        let list = match item.find('{') {
            Some(open) => &item[open + 1..item.rfind('}').expect("a closing brace")],
            None => item.rsplit("::").next().unwrap_or(""),
        };
        names.extend(
            list.split(',')
                .map(|n| n.trim().to_owned())
                .filter(|n| !n.is_empty()),
        );
        rest = &tail[end..];
    }
    names.remove("TERMS_KEPT");
    names
}

#[test]
fn every_script_is_modelled_and_unchanged_since() {
    let exported = exported_scripts();
    let covered: BTreeSet<String> = COVERED.iter().map(|s| s.to_string()).collect();
    assert!(
        exported.len() >= 18,
        "the scripts' exports were not read: {exported:?}"
    );
    assert_eq!(
        exported, covered,
        "every script of distlock::scripts must be modelled (distlock-model/src/scripts/, \
         `COVERED`, and driven by tests/conformance/ops.rs)"
    );
    let real = Real::start();
    let recorded = include_str!("../../src/scripts/digests.txt");
    let recorded: BTreeMap<&str, &str> = recorded
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split_once(' ').expect("`NAME sha1` lines"))
        .collect();
    let changed: Vec<String> = real
        .shas
        .iter()
        .filter(|(name, sha)| recorded.get(*name) != Some(&sha.as_str()))
        .map(|(name, sha)| format!("{name} {sha}"))
        .collect();
    assert!(
        changed.is_empty(),
        "scripts changed since the model was written against them: bring their model \
         (distlock-model/src/scripts/) and the conformance operations along, then record \
         these lines in distlock-model/src/scripts/digests.txt:\n{}",
        changed.join("\n")
    );
}
