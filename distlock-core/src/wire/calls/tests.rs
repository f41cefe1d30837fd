//! What the acquire calls put on the wire and how they read the replies: the keys and
//! arguments of a shared hold's acquire in each script's order, and the status codes.

use std::time::Duration;

use super::*;
use crate::wire::keys::LockKeys;
use crate::wire::request::{
    Call, Lua, Request, ACQUIRE_PERMIT_SCRIPT, ACQUIRE_READ_SCRIPT, ACQUIRE_WRITE_SCRIPT,
};

const TTL: Duration = Duration::from_millis(10_000);
const RETENTION: Duration = Duration::from_millis(60_000);

/// A shared hold's acquire of the lock `k`, plain or fenced.
fn shared_call(keys: &LockKeys, shared: Shared, fenced: Option<Duration>) -> SharedAcquireCall<'_> {
    SharedAcquireCall {
        keys,
        value: b"d2:o",
        id: b"r1",
        ttl: TTL,
        shared,
        fenced,
        wait: None,
        turn: None,
    }
}

/// A script call's script and its arguments after the SHA1, as text.
fn sent(call: &impl Call) -> (&'static Lua, Vec<String>) {
    let Request::Script(script, cmd) = call.request() else {
        panic!("a script call");
    };
    let args = cmd
        .args_iter()
        .skip(2) // EVALSHA and the SHA1
        .map(|arg| match arg {
            redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
            _ => "<not a plain argument>".to_owned(),
        })
        .collect();
    (script, args)
}

#[test]
fn a_shared_holds_acquire_sends_each_scripts_keys_and_arguments_in_their_order() {
    let keys = LockKeys::new("distlock", "k").unwrap();
    let (lock, fence, writer) = (keys.lock(), &*keys.fence(), &*keys.writer());
    let sends = |shared, fenced, script: &Lua, want: &[&str]| {
        let (sent_script, args) = sent(&shared_call(&keys, shared, fenced));
        assert!(std::ptr::eq(sent_script, script), "{shared:?}");
        assert_eq!(args, want, "{shared:?}, fenced: {fenced:?}");
    };
    let (permit, read) = (&ACQUIRE_PERMIT_SCRIPT, &ACQUIRE_READ_SCRIPT);
    let three = Shared::Permits(3);
    sends(
        three,
        None,
        permit,
        &["2", lock, fence, "d2:o", "10000", "3", "0", "r1"],
    );
    let want = ["2", lock, fence, "d2:o", "10000", "3", "60000", "r1"];
    sends(three, Some(RETENTION), permit, &want);
    let want = ["3", lock, fence, writer, "d2:o", "10000", "60000", "r1"];
    sends(Shared::Read, Some(RETENTION), read, &want);
    let write = |waits| Shared::Write { waits };
    let want = ["3", lock, fence, writer, "d2:o", "10000", "0", "r1", "1000"];
    sends(write(true), None, &ACQUIRE_WRITE_SCRIPT, &want);
    let want = ["3", lock, fence, writer, "d2:o", "10000", "0", "r1", "0"];
    sends(write(false), None, &ACQUIRE_WRITE_SCRIPT, &want);
    // A permit's waiter in its turn adds its queue, release channel and ids, then its ticket;
    // a read's the writers' lapses too; a write ignores a turn.
    let turn = Some(Turn {
        ticket: 7,
        sharded: true,
        life: 3000,
    });
    let (queue, ids) = (format!("{lock}:queue"), format!("{lock}:queue:ids"));
    let until = format!("{lock}:queue:until");
    let (queue, chan, ids, until) = (&*queue, keys.channel(), &*ids, &*until);
    let args = |shared| {
        sent(&SharedAcquireCall {
            turn,
            ..shared_call(&keys, shared, None)
        })
        .1
    };
    let want = [
        "5", lock, fence, queue, chan, ids, "d2:o", "10000", "3", "0", "r1", "7", "s", "3000",
    ];
    assert_eq!(args(three), want);
    let want = [
        "7", lock, fence, writer, queue, chan, ids, until, "d2:o", "10000", "0", "r1", "7", "s",
        "3000",
    ];
    assert_eq!(args(Shared::Read), want);
    let want = ["3", lock, fence, writer, "d2:o", "10000", "0", "r1", "1000"];
    assert_eq!(args(write(true)), want);
}

#[test]
fn a_shared_holds_acquire_decodes_a_count_mismatch_for_a_permit_only() {
    let keys = LockKeys::new("distlock", "k").unwrap();
    let decode = |shared, fenced, raw| shared_call(&keys, shared, fenced).decode(raw);
    let found = |acquired| Some(SharedAcquired::Found(acquired));
    let taken = |token| found(Acquired::Taken { token });
    let busy = found(Acquired::Busy {
        pttl: Some(40),
        pass: 0,
    });
    let write = Shared::Write { waits: true };
    for shared in [Shared::Permits(2), Shared::Read, write] {
        assert_eq!(decode(shared, None, (1, 0)), taken(None));
        assert_eq!(decode(shared, Some(RETENTION), (1, 9)), taken(Some(9)));
        assert_eq!(decode(shared, Some(RETENTION), (1, -9)), None);
        assert_eq!(decode(shared, None, (0, 40)), busy);
        assert_eq!(decode(shared, None, (2, 0)), found(Acquired::Incompatible));
        assert_eq!(decode(shared, None, (4, 0)), None);
    }
    let mismatch = Some(SharedAcquired::Mismatch { permits: 5 });
    assert_eq!(decode(Shared::Permits(2), None, (3, 5)), mismatch);
    assert_eq!(decode(Shared::Permits(2), None, (3, -5)), None);
    assert_eq!(decode(Shared::Read, None, (3, 5)), None);
    assert_eq!(decode(write, None, (3, 5)), None);
}

#[test]
fn an_acquire_scripts_status_decodes_as_taken_busy_or_incompatible() {
    let keys = LockKeys::new("distlock", "k").unwrap();
    let taken = |token| Some(Acquired::Taken { token });
    let busy = Some(Acquired::Busy {
        pttl: Some(40),
        pass: 0,
    });
    let fenced = FencedAcquireCall {
        keys: &keys,
        value: b"d2:o",
        id: b"r1",
        ttl: TTL,
        retention: RETENTION,
        wait: None,
    };
    assert_eq!(fenced.decode((1, 7)), taken(Some(7)));
    assert_eq!(fenced.decode((1, -7)), None);
    assert_eq!(fenced.decode((0, 40)), busy);
    assert_eq!(fenced.decode((2, 0)), Some(Acquired::Incompatible));
    assert_eq!(fenced.decode((3, 2)), None);
    let handed = HandedAcquireCall {
        keys: &keys,
        value: b"d2:o",
        id: b"r1",
        ttl: TTL,
        ticket: 1,
        window: TTL,
        life: 3000,
        sharded: false,
        confirm: None,
        wait: None,
    };
    assert_eq!(handed.decode((1, 0)), taken(None));
    assert_eq!(handed.decode((0, 40)), busy);
    // Readers hold it: queued behind them.
    assert_eq!(handed.decode((3, 2)), Some(Acquired::Readers { pttl: 2 }));
    let fenced_waiter = HandedAcquireCall {
        confirm: Some(Some(RETENTION)),
        ..handed
    };
    assert_eq!(fenced_waiter.decode((1, 7)), taken(Some(7)));
    assert_eq!(fenced_waiter.decode((0, 40)), busy);
    let replicated_waiter = HandedAcquireCall {
        confirm: Some(None),
        ..handed
    };
    assert_eq!(replicated_waiter.decode((1, 0)), taken(None));
}

#[test]
fn a_handed_waiters_attempt_sends_its_keys_in_order_and_the_fence_key_when_it_confirms() {
    let keys = LockKeys::new("distlock", "k").unwrap();
    let (lock, chan, fence) = (keys.lock(), keys.channel(), keys.fence());
    let (queue, ids) = (keys.queue().to_string(), keys.queue_ids().to_string());
    let until = keys.queue_until().to_string();
    let call = |confirm| HandedAcquireCall {
        keys: &keys,
        value: b"d2:o",
        id: b"r1",
        ttl: TTL,
        ticket: 7,
        window: Duration::from_millis(1000),
        life: 2500,
        sharded: true,
        confirm,
        wait: None,
    };
    let plain = [
        "5", lock, &queue, chan, &ids, &until, "d2:o", "10000", "r1", "7", "1000", "s", "2500",
    ];
    assert_eq!(sent(&call(None)).1, plain);
    let fenced = [
        "6", lock, &queue, chan, &ids, &until, &fence, "d2:o", "10000", "r1", "7", "1000", "s",
        "2500", "60000",
    ];
    assert_eq!(sent(&call(Some(Some(RETENTION)))).1, fenced);
    let replicated = [
        "6", lock, &queue, chan, &ids, &until, &fence, "d2:o", "10000", "r1", "7", "1000", "s",
        "2500", "0",
    ];
    assert_eq!(sent(&call(Some(None))).1, replicated);
}

#[test]
fn a_queued_acquire_counts_the_waiters_ahead_when_busy() {
    let keys = LockKeys::new("distlock", "k").unwrap();
    let queued = |fenced| QueuedAcquireCall {
        keys: &keys,
        value: b"d2:o",
        id: b"r1",
        ttl: TTL,
        fenced,
        ticket: 1,
        queue: true,
        life: 3000,
    };
    let busy = |pass| {
        Some(Acquired::Busy {
            pttl: Some(40),
            pass,
        })
    };
    let (plain, fenced) = (queued(None), queued(Some(RETENTION)));
    assert_eq!(
        plain.decode((1, 7, 0)),
        Some(Acquired::Taken { token: None })
    );
    let token = Some(Acquired::Taken { token: Some(7) });
    assert_eq!(fenced.decode((1, 7, 0)), token);
    assert_eq!(
        plain.decode((0, 40, 2)),
        busy(2),
        "held: each waiter ahead takes a turn"
    );
    assert_eq!(
        plain.decode((3, 40, 2)),
        busy(1),
        "free: the first ahead takes it now"
    );
    assert_eq!(plain.decode((2, 0, 0)), Some(Acquired::Incompatible));
    assert_eq!(plain.decode((5, 0, 0)), None);
    assert_eq!(plain.decode((0, 40, -1)), None);
}
