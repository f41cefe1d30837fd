// A `compile_fail` example of the distlock crate docs (distlock/src/lib.rs), kept equal to
// it by tests/doc_examples.rs; its error is pinned by the .stderr next to it.
use distlock::distributed_lock;
struct PlainError; // no `From<distlock::Error>`
#[distributed_lock(key = "job")]
async fn job() -> Result<(), PlainError> { Ok(()) }
fn main() {}
