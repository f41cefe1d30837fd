// A `compile_fail` example of the distlock crate docs (distlock/src/lib.rs), kept equal to
// it by tests/doc_examples.rs; its error is pinned by the .stderr next to it.
use distlock::distributed_lock;
struct E; impl From<distlock::Error> for E { fn from(_: distlock::Error) -> Self { E } }
struct Opaque;
#[distributed_lock(key = "item:<item>")] // error: `Opaque` does not implement `Display`
async fn take(item: Opaque) -> Result<(), E> { Ok(()) }
fn main() {}
