//! Every Lua script distlock sends compiles in a real redis-server (`SCRIPT LOAD`): a script
//! that does not compile fails every call that sends it, and a test that only runs its
//! common path would report that as a timeout far from its cause. The list is every constant
//! of `distlock::scripts`.

use distlock::scripts;
use testkit::RedisServer;

const SCRIPTS: [(&str, &str); 16] = [
    ("ACQUIRE_FENCED", scripts::ACQUIRE_FENCED),
    ("ACQUIRE_HANDED", scripts::ACQUIRE_HANDED),
    ("ACQUIRE_QUEUED", scripts::ACQUIRE_QUEUED),
    ("ACQUIRE_PERMIT", scripts::ACQUIRE_PERMIT),
    ("ACQUIRE_READ", scripts::ACQUIRE_READ),
    ("ACQUIRE_WRITE", scripts::ACQUIRE_WRITE),
    ("ACQUIRE_ALL", scripts::ACQUIRE_ALL),
    ("CLIENT_RECORD", scripts::CLIENT_RECORD),
    ("FENCE_FLOOR", scripts::FENCE_FLOOR),
    ("FENCED_WRITE", scripts::FENCED_WRITE),
    ("LEADER_CURRENT", scripts::LEADER_CURRENT),
    ("LEADER_PROCLAIM", scripts::LEADER_PROCLAIM),
    ("LEAVE_QUEUE", scripts::LEAVE_QUEUE),
    ("RELEASE", scripts::RELEASE),
    ("RELEASE_MANY", scripts::RELEASE_MANY),
    ("RENEW", scripts::RENEW),
];

#[tokio::test]
async fn every_script_compiles_in_redis() {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    for (name, source) in SCRIPTS {
        let loaded: redis::RedisResult<String> = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(source)
            .query_async(&mut conn)
            .await;
        if let Err(error) = loaded {
            panic!("{name} does not compile: {error}");
        }
    }
}
