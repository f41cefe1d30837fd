//! The part of a Redis server the scripts see: a keyspace of strings, sorted sets, hashes and
//! lists with expiry on an explicit clock, and the commands the scripts call, with Redis 7's
//! semantics where the scripts depend on them (a key lives while `now <= expiry`; an emptied
//! collection is deleted; `PEXPIRE` to a time not after now deletes; `SET` drops the expiry
//! unless it sets one or keeps it (`KEEPTTL`); the other writes keep it).

use std::collections::BTreeMap;

/// What a key holds.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Value {
    /// A string.
    Str(String),
    /// A sorted set: member → score (every score the scripts write is an integer).
    ZSet(BTreeMap<String, i64>),
    /// A hash: field → value.
    Hash(BTreeMap<String, String>),
    /// A list, head first.
    List(Vec<String>),
}

impl Value {
    /// The name `TYPE` answers.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Str(_) => "string",
            Value::ZSet(_) => "zset",
            Value::Hash(_) => "hash",
            Value::List(_) => "list",
        }
    }

    fn is_empty(&self) -> bool {
        match self {
            Value::Str(_) => false,
            Value::ZSet(z) => z.is_empty(),
            Value::Hash(h) => h.is_empty(),
            Value::List(l) => l.is_empty(),
        }
    }
}

/// A key's value and its expiry (server clock, ms since the epoch).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Entry {
    /// What it holds.
    pub value: Value,
    /// When it expires (it lives while the clock is at or before it), if it does.
    pub expires_at: Option<i64>,
}

/// A keyspace: every key with its entry, expired ones included until something looks at them
/// (or [`Keyspace::purge`] drops them).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Keyspace {
    entries: BTreeMap<String, Entry>,
}

/// A command on a key of the wrong type (`WRONGTYPE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WrongType;

/// How a `ZADD` treats a member already there or a new one (`NX`, `XX`, `GT`, `LT`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZAdd {
    /// Add or update.
    Any,
    /// Only add a new member.
    Nx,
    /// Only update a member already there.
    Xx,
    /// Add, or update to a greater score only.
    Gt,
    /// Add, or update to a lower score only.
    Lt,
}

/// One end of a score range (`ZRANGEBYSCORE`, `ZCOUNT`, `ZREMRANGEBYSCORE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bound {
    /// `-inf`.
    NegInf,
    /// A score, included.
    Incl(i64),
    /// A score, excluded (`(`).
    Excl(i64),
}

impl Bound {
    fn at_least(self, s: i64) -> bool {
        match self {
            Bound::NegInf => true,
            Bound::Incl(b) => s >= b,
            Bound::Excl(b) => s > b,
        }
    }

    fn at_most(self, s: i64) -> bool {
        match self {
            Bound::NegInf => false,
            Bound::Incl(b) => s <= b,
            Bound::Excl(b) => s < b,
        }
    }
}

impl Keyspace {
    /// An empty keyspace.
    pub fn new() -> Self {
        Self::default()
    }

    /// The live keys at `now` (ms) with their entries, in key order.
    pub fn live(&self, now: i64) -> impl Iterator<Item = (&String, &Entry)> {
        self.entries
            .iter()
            .filter(move |(_, e)| e.expires_at.is_none_or(|at| now <= at))
    }

    /// The live entry of `key` at `now`, if any.
    pub fn peek(&self, key: &str, now: i64) -> Option<&Entry> {
        self.entries
            .get(key)
            .filter(|e| e.expires_at.is_none_or(|at| now <= at))
    }

    /// Drops every key expired at `now` (what lazy and active expiry do over time; nothing a
    /// command can see changes).
    pub fn purge(&mut self, now: i64) {
        self.entries
            .retain(|_, e| e.expires_at.is_none_or(|at| now <= at));
    }

    /// Sets `key` to `entry` as it is (a test's or a fault's write, not a command's).
    pub fn put(&mut self, key: &str, entry: Entry) {
        self.entries.insert(key.to_owned(), entry);
    }

    /// Removes `key` (a fault: an eviction, a key deleted by hand).
    pub fn remove(&mut self, key: &str) {
        self.entries.remove(key);
    }

    /// Moves every expiry by `by` ms (a server whose clock stepped by `-by`: what its keys
    /// have left, seen from the new clock, is `by` more).
    pub fn shift_expiries(&mut self, by: i64) {
        for e in self.entries.values_mut() {
            if let Some(at) = e.expires_at.as_mut() {
                *at += by;
            }
        }
    }
}

/// The commands the scripts call, on a keyspace at one instant (a script sees one clock).
pub struct Redis<'a> {
    ks: &'a mut Keyspace,
    now_us: i64,
    /// What was published, in order: (channel, message).
    pub published: Vec<(String, String)>,
}

impl<'a> Redis<'a> {
    /// The commands on `ks` with the server clock at `now_us` (µs since the epoch).
    pub fn new(ks: &'a mut Keyspace, now_us: i64) -> Self {
        Redis {
            ks,
            now_us,
            published: Vec::new(),
        }
    }

    /// The clock in ms (what expiry compares with).
    pub fn now_ms(&self) -> i64 {
        self.now_us.div_euclid(1000)
    }

    /// `TIME`: seconds and microseconds.
    pub fn time(&self) -> (i64, i64) {
        (
            self.now_us.div_euclid(1_000_000),
            self.now_us.rem_euclid(1_000_000),
        )
    }

    fn live(&mut self, key: &str) -> Option<&mut Entry> {
        let now = self.now_ms();
        if self
            .ks
            .entries
            .get(key)
            .is_some_and(|e| e.expires_at.is_some_and(|at| now > at))
        {
            self.ks.entries.remove(key);
        }
        self.ks.entries.get_mut(key)
    }

    /// Drops `key` if its collection is empty (Redis never keeps an empty one).
    fn tidy(&mut self, key: &str) {
        if self.ks.entries.get(key).is_some_and(|e| e.value.is_empty()) {
            self.ks.entries.remove(key);
        }
    }

    /// `TYPE`.
    pub fn type_of(&mut self, key: &str) -> &'static str {
        self.live(key).map_or("none", |e| e.value.type_name())
    }

    /// `EXISTS` (one key).
    pub fn exists(&mut self, key: &str) -> bool {
        self.live(key).is_some()
    }

    /// `GET`.
    pub fn get(&mut self, key: &str) -> Result<Option<String>, WrongType> {
        match self.live(key) {
            None => Ok(None),
            Some(Entry {
                value: Value::Str(s),
                ..
            }) => Ok(Some(s.clone())),
            Some(_) => Err(WrongType),
        }
    }

    /// `SET key value [PX ms]` (the expiry dropped without `PX`).
    pub fn set(&mut self, key: &str, value: &str, px: Option<i64>) {
        let expires_at = px.map(|ms| self.now_ms() + ms);
        self.ks.entries.insert(
            key.to_owned(),
            Entry {
                value: Value::Str(value.to_owned()),
                expires_at,
            },
        );
    }

    /// `SET key value KEEPTTL`: the value replaced, the key's expiry (if any) kept.
    pub fn set_keepttl(&mut self, key: &str, value: &str) {
        let expires_at = self.live(key).and_then(|e| e.expires_at);
        self.ks.entries.insert(
            key.to_owned(),
            Entry {
                value: Value::Str(value.to_owned()),
                expires_at,
            },
        );
    }

    /// `SET key value [PX ms] GET`: the old value; `WRONGTYPE` (nothing set) on another type.
    pub fn set_get(
        &mut self,
        key: &str,
        value: &str,
        px: Option<i64>,
    ) -> Result<Option<String>, WrongType> {
        let old = self.get(key)?;
        self.set(key, value, px);
        Ok(old)
    }

    /// `DEL` (one key): 1 if it was there.
    pub fn del(&mut self, key: &str) -> i64 {
        i64::from(self.live(key).is_some() && self.ks.entries.remove(key).is_some())
    }

    /// `PTTL`: -2 no key, -1 no expiry, else the ms left (0 in its last ms).
    pub fn pttl(&mut self, key: &str) -> i64 {
        let now = self.now_ms();
        match self.live(key) {
            None => -2,
            Some(Entry {
                expires_at: None, ..
            }) => -1,
            Some(Entry {
                expires_at: Some(at),
                ..
            }) => (*at - now).max(0),
        }
    }

    /// `PEXPIRE key ms`: 1 if the key is there; a time not after now deletes it.
    pub fn pexpire(&mut self, key: &str, ms: i64) -> i64 {
        let now = self.now_ms();
        if self.live(key).is_none() {
            return 0;
        }
        if ms <= 0 {
            self.ks.entries.remove(key);
        } else if let Some(e) = self.live(key) {
            e.expires_at = Some(now + ms);
        }
        1
    }

    /// `PERSIST`.
    pub fn persist(&mut self, key: &str) {
        if let Some(e) = self.live(key) {
            e.expires_at = None;
        }
    }

    fn zset(&mut self, key: &str) -> Option<&mut BTreeMap<String, i64>> {
        match self.live(key) {
            Some(Entry {
                value: Value::ZSet(z),
                ..
            }) => Some(z),
            _ => None,
        }
    }

    /// `ZADD key [flag] score member` (the scripts only call it on a sorted set or no key).
    pub fn zadd(&mut self, key: &str, score: i64, member: &str, flag: ZAdd) {
        if self.live(key).is_none() {
            self.ks.entries.insert(
                key.to_owned(),
                Entry {
                    value: Value::ZSet(BTreeMap::new()),
                    expires_at: None,
                },
            );
        }
        let Some(z) = self.zset(key) else { return };
        match (z.get(member).copied(), flag) {
            (None, ZAdd::Xx) => {}
            (None, _) => {
                z.insert(member.to_owned(), score);
            }
            (Some(_), ZAdd::Nx) => {}
            (Some(old), ZAdd::Gt) if score <= old => {}
            (Some(old), ZAdd::Lt) if score >= old => {}
            (Some(_), _) => {
                z.insert(member.to_owned(), score);
            }
        }
        self.tidy(key);
    }

    /// `ZREM key member`: 1 if it was there.
    pub fn zrem(&mut self, key: &str, member: &str) -> i64 {
        let removed = self.zset(key).is_some_and(|z| z.remove(member).is_some());
        self.tidy(key);
        i64::from(removed)
    }

    /// `ZSCORE`.
    pub fn zscore(&mut self, key: &str, member: &str) -> Option<i64> {
        self.zset(key).and_then(|z| z.get(member).copied())
    }

    /// `ZCARD`.
    pub fn zcard(&mut self, key: &str) -> i64 {
        self.zset(key).map_or(0, |z| z.len() as i64)
    }

    /// The members in rank order (score, then member).
    fn ranked(&mut self, key: &str) -> Vec<(String, i64)> {
        let mut all: Vec<(String, i64)> = self
            .zset(key)
            .map(|z| z.iter().map(|(m, s)| (m.clone(), *s)).collect())
            .unwrap_or_default();
        all.sort_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
        all
    }

    /// `ZRANGE key start stop WITHSCORES` (ranks, negative from the end).
    pub fn zrange(&mut self, key: &str, start: i64, stop: i64) -> Vec<(String, i64)> {
        let all = self.ranked(key);
        let n = all.len() as i64;
        let fix = |i: i64| if i < 0 { n + i } else { i };
        let (a, b) = (fix(start).max(0), fix(stop).min(n - 1));
        if n == 0 || a > b {
            return Vec::new();
        }
        all[a as usize..=b as usize].to_vec()
    }

    /// `ZRANGEBYSCORE key min max`.
    pub fn zrangebyscore(&mut self, key: &str, min: Bound, max: Bound) -> Vec<String> {
        self.ranked(key)
            .into_iter()
            .filter(|(_, s)| min.at_least(*s) && max.at_most(*s))
            .map(|(m, _)| m)
            .collect()
    }

    /// `ZCOUNT key min max`.
    pub fn zcount(&mut self, key: &str, min: Bound, max: Bound) -> i64 {
        self.zrangebyscore(key, min, max).len() as i64
    }

    /// `ZREMRANGEBYSCORE key min max`.
    pub fn zremrangebyscore(&mut self, key: &str, min: Bound, max: Bound) {
        if let Some(z) = self.zset(key) {
            z.retain(|_, s| !(min.at_least(*s) && max.at_most(*s)));
        }
        self.tidy(key);
    }

    fn hash(&mut self, key: &str, create: bool) -> Option<&mut BTreeMap<String, String>> {
        if create && self.live(key).is_none() {
            self.ks.entries.insert(
                key.to_owned(),
                Entry {
                    value: Value::Hash(BTreeMap::new()),
                    expires_at: None,
                },
            );
        }
        match self.live(key) {
            Some(Entry {
                value: Value::Hash(h),
                ..
            }) => Some(h),
            _ => None,
        }
    }

    /// `HSET key field value`.
    pub fn hset(&mut self, key: &str, field: &str, value: &str) {
        if let Some(h) = self.hash(key, true) {
            h.insert(field.to_owned(), value.to_owned());
        }
    }

    /// `HGET`.
    pub fn hget(&mut self, key: &str, field: &str) -> Option<String> {
        self.hash(key, false).and_then(|h| h.get(field).cloned())
    }

    /// `HDEL key field`: 1 if it was there.
    pub fn hdel(&mut self, key: &str, field: &str) -> i64 {
        let removed = self
            .hash(key, false)
            .is_some_and(|h| h.remove(field).is_some());
        self.tidy(key);
        i64::from(removed)
    }

    /// `HGETALL`, as field/value pairs in field order.
    pub fn hgetall(&mut self, key: &str) -> Vec<(String, String)> {
        self.hash(key, false)
            .map(|h| h.iter().map(|(f, v)| (f.clone(), v.clone())).collect())
            .unwrap_or_default()
    }

    fn list(&mut self, key: &str, create: bool) -> Option<&mut Vec<String>> {
        if create && self.live(key).is_none() {
            self.ks.entries.insert(
                key.to_owned(),
                Entry {
                    value: Value::List(Vec::new()),
                    expires_at: None,
                },
            );
        }
        match self.live(key) {
            Some(Entry {
                value: Value::List(l),
                ..
            }) => Some(l),
            _ => None,
        }
    }

    /// `LPUSH key value`.
    pub fn lpush(&mut self, key: &str, value: &str) {
        if let Some(l) = self.list(key, true) {
            l.insert(0, value.to_owned());
        }
    }

    /// `LTRIM key 0 last`.
    pub fn ltrim_to(&mut self, key: &str, last: usize) {
        if let Some(l) = self.list(key, false) {
            l.truncate(last + 1);
        }
        self.tidy(key);
    }

    /// `LINDEX key i`.
    pub fn lindex(&mut self, key: &str, i: usize) -> Option<String> {
        self.list(key, false).and_then(|l| l.get(i).cloned())
    }

    /// `LSET key i value`.
    pub fn lset(&mut self, key: &str, i: usize, value: &str) {
        if let Some(slot) = self.list(key, false).and_then(|l| l.get_mut(i)) {
            *slot = value.to_owned();
        }
    }

    /// `LRANGE key 0 -1`.
    pub fn lrange(&mut self, key: &str) -> Vec<String> {
        self.list(key, false).cloned().unwrap_or_default()
    }

    /// `PUBLISH` / `SPUBLISH`.
    pub fn publish(&mut self, chan: &str, msg: &str) {
        self.published.push((chan.to_owned(), msg.to_owned()));
    }
}

/// Lua's `tonumber` on what Redis returns (integers in every case the scripts meet; a string
/// that is not a number is `None`).
pub fn lua_number(s: &str) -> Option<i64> {
    let t = s.trim();
    if let Ok(n) = t.parse::<i64>() {
        return Some(n);
    }
    t.parse::<f64>()
        .ok()
        .filter(|f| f.is_finite())
        .map(|f| f as i64)
}
