//! `#[distributed_lock]` adds no warning and no lint to the crate that uses it.
//!
//! Every shape the attribute accepts is here, written the way people write them (one-line
//! bodies, parameters only the key reads, early returns, leading items), in a crate that denies
//! all rustc warnings and all of `clippy::all` and `clippy::pedantic`. The workspace's clippy
//! run (`scripts/test.sh`: `cargo clippy --workspace --all-targets -- -D warnings`) compiles
//! this file, so any lint in generated code fails the suite; the tests below also run each
//! function once (no client is installed, so each returns `NotInitialized` through its own
//! error type without touching Redis).
#![deny(warnings, clippy::all, clippy::pedantic)]

// Short functions are written on one line here, as people write them: rustfmt would spread them
// over three lines, where rustc's `unused_braces` (the warning that started issue 9) never fires.
#[rustfmt::skip]
mod shapes {
    use std::fmt::Display;
    use std::time::Duration;

    use distlock::distributed_lock;

    #[derive(Debug)]
    enum AppError {
        Lock(distlock::Error),
        Invalid,
    }

    impl From<distlock::Error> for AppError {
        fn from(error: distlock::Error) -> Self {
            AppError::Lock(error)
        }
    }

    impl From<std::num::ParseIntError> for AppError {
        fn from(_: std::num::ParseIntError) -> Self {
            AppError::Invalid
        }
    }

    const ORDER_TTL: Duration = Duration::from_secs(10);

    // One-expression bodies on one line, the parameter read only by the key.
    #[distributed_lock(key = "a:<id>", ttl = "10s")]
    async fn one_line(id: u32) -> Result<u32, AppError> { Ok(7) }

    #[distributed_lock(key = "b:<id>", ttl = "1m30s", renew, fenced)]
    async fn renewed(id: u64) -> Result<(), AppError> { Ok(()) }

    // Early return, `?`, a leading item, an unused parameter.
    #[distributed_lock(key = "parse:<input>", wait = "1.5s")]
    async fn parse(input: &str, _trace: Option<&str>) -> Result<u32, AppError> {
        const LIMIT: u32 = 100;
        if input.is_empty() {
            return Err(AppError::Invalid);
        }
        let value: u32 = input.parse()?;
        Ok(value.min(LIMIT))
    }

    #[distributed_lock(key = "sweep:<shard>", ttl = "5m", skip, min_hold = "1m")]
    async fn sweep(shard: u8) -> Result<Option<u8>, AppError> { Ok(None) }

    // A key list: several locks taken together, a parameter read only by the keys.
    #[distributed_lock(key = ["account:<from>", "account:<to>"], ttl = "5s", fenced)]
    async fn transfer(from: u64, to: u64) -> Result<u8, AppError> { Ok(3) }

    #[distributed_lock(key = ["x:<id>", "y:<id>", "z"], skip)]
    async fn three(id: u64) -> Result<(), AppError> { Ok(()) }

    #[distributed_lock(key = "pay:<id>", ttl = ORDER_TTL, client = "payments")]
    async fn payout(id: u64) -> Result<u64, AppError> { Ok(id) }

    // Generics, `impl Trait` arguments and return type.
    #[distributed_lock(key = "item:<kind>:<id>")]
    async fn generic<K: Display + Sync + ?Sized, I: Display + Send>(kind: &K, id: I) -> Result<u8, AppError> { Ok(1) }

    #[distributed_lock(key = "tag:<tag>")]
    async fn opaque(tag: impl Display + Send) -> Result<impl Display, AppError> { Ok(1) }

    struct Request {
        user: u64,
        pair: (u8, char),
    }

    struct Service {
        tenant: String,
        count: u32,
    }

    impl Service {
        const TTL: Duration = Duration::from_secs(5);

        #[distributed_lock(key = "user:<self.tenant>:<req.user>:<req.pair.1>", ttl = Self::TTL)]
        async fn update(&self, req: &Request) -> Result<(), AppError> { Ok(()) }

        #[distributed_lock(key = "count:<self.tenant>", wait = "2s")]
        async fn bump(&mut self, by: u32) -> Result<u32, AppError> {
            self.count += by;
            Ok(self.count)
        }

        #[distributed_lock(key = "close:<self.tenant>")]
        async fn close(self) -> Result<String, AppError> { Ok(self.tenant) }
    }

    trait Settings {
        const TTL: Duration;
    }

    struct Fast;

    impl Settings for Fast {
        const TTL: Duration = Duration::from_millis(500);
    }

    struct Scoped<S>(std::marker::PhantomData<S>);

    impl<S: Settings + Sync> Scoped<S> {
        #[distributed_lock(key = "scoped:<id>", ttl = S::TTL)]
        async fn run(&self, id: u32) -> Result<u32, AppError> { Ok(1) }
    }

    #[allow(async_fn_in_trait)]
    trait Settle {
        async fn settle(&self, id: u64) -> Result<u64, AppError>;

        #[distributed_lock(key = "audit:<id>")]
        async fn audit(&self, id: u64) -> Result<u64, AppError> { Ok(0) }
    }

    impl Settle for Service {
        #[distributed_lock(key = "settle:<self.tenant>:<id>", ttl = "10s")]
        async fn settle(&self, id: u64) -> Result<u64, AppError> { Ok(1) }
    }

    #[async_trait::async_trait]
    trait Orders {
        async fn order(&self, id: u64, req: &Request) -> Result<u64, AppError>;
        async fn nightly(&self, day: u32) -> Result<(), AppError>;
    }

    #[async_trait::async_trait]
    impl Orders for Service {
        #[distributed_lock(key = "order:<self.tenant>:<id>:<req.user>", ttl = "10s", renew)]
        async fn order(&self, id: u64, req: &Request) -> Result<u64, AppError> { Ok(1) }

        #[distributed_lock(key = "nightly:<day>", skip)]
        async fn nightly(&self, day: u32) -> Result<(), AppError> { Ok(()) }
    }

    #[tracing::instrument]
    #[distributed_lock(key = "traced:<id>")]
    async fn traced(id: u64) -> Result<u64, AppError> { Ok(2) }

    // Parameters written as patterns, as axum handlers take their extractors (local newtypes):
    // names only the key reads, a field path, `ref`/`mut` bindings the body uses.
    struct Path<T>(T);
    struct Json<T>(T);

    struct Order {
        id: u64,
        customer: String,
        lines: Vec<u32>,
    }

    #[distributed_lock(key = "settle:<id>:<req.user>", ttl = "10s", wait = "2s", fenced)]
    async fn handler(Path(id): Path<u64>, Json(req): Json<&Request>) -> Result<u8, AppError> { Ok(req.pair.0) }

    #[distributed_lock(key = ["order:<order_id>", "customer:<customer>"])]
    async fn order(Json(Order { id: order_id, customer, .. }): Json<Order>) -> Result<(), AppError> { Ok(()) }

    #[distributed_lock(key = "bind:<name>:<count>:<pair.1>", skip)]
    async fn bindings(Json(ref name): Json<String>, Path(mut count): Path<usize>, (pair, _): ((u8, char), u8)) -> Result<Option<usize>, AppError> {
        count += name.len();
        Ok(Some(count))
    }

    #[async_trait::async_trait]
    trait Handlers {
        async fn ship(&self, id: Path<u64>, order: Json<Order>) -> Result<usize, AppError>;
        async fn count(&mut self, pair: (u32, u32)) -> Result<u32, AppError>;
    }

    #[async_trait::async_trait]
    impl Handlers for Service {
        #[distributed_lock(key = "order:<self.tenant>:<id>:<customer>", ttl = "10s", renew)]
        async fn ship(&self, Path(id): Path<u64>, Json(Order { customer, ref lines, .. }): Json<Order>) -> Result<usize, AppError> { Ok(lines.len()) }

        #[distributed_lock(key = "count:<self.tenant>:<a>")]
        async fn count(&mut self, (a, mut b): (u32, u32)) -> Result<u32, AppError> {
            b += self.count;
            Ok(b)
        }
    }

    fn block_on<F: std::future::Future>(future: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
            .block_on(future)
    }

    fn not_initialized<T: std::fmt::Debug>(result: Result<T, AppError>) {
        match result {
            Err(AppError::Lock(distlock::Error::NotInitialized)) => {}
            other => panic!("expected Err(NotInitialized), got {other:?}"),
        }
    }

    #[test]
    fn free_functions_reach_the_runtime() {
        block_on(async {
            not_initialized(one_line(1).await);
            not_initialized(renewed(1).await);
            not_initialized(parse("12", None).await);
            not_initialized(sweep(1).await);
            not_initialized(generic("k", 1).await);
            not_initialized(opaque("t").await.map(|value| value.to_string()));
            not_initialized(traced(1).await);
            not_initialized(transfer(1, 2).await);
            not_initialized(three(1).await);
            let req = Request { user: 1, pair: (2, 'p') };
            not_initialized(handler(Path(1), Json(&req)).await);
            let order_of = |id| Order { id, customer: "ada".to_owned(), lines: vec![1] };
            not_initialized(order(Json(order_of(1))).await);
            not_initialized(bindings(Json("n".to_owned()), Path(1), ((2, 'y'), 3)).await);
            match payout(1).await {
                Err(AppError::Lock(distlock::Error::UnknownClient { name })) => {
                    assert_eq!(name, "payments");
                }
                other => panic!("expected Err(UnknownClient), got {other:?}"),
            }
        });
    }

    #[test]
    fn methods_reach_the_runtime() {
        block_on(async {
            let mut service = Service {
                tenant: "acme".to_owned(),
                count: 0,
            };
            let req = Request {
                user: 7,
                pair: (1, 'x'),
            };
            not_initialized(service.update(&req).await);
            not_initialized(service.bump(1).await);
            assert_eq!(service.count, 0, "the body must not run without the lock");
            not_initialized(service.settle(1).await);
            not_initialized(service.audit(1).await);
            not_initialized(service.order(1, &req).await);
            not_initialized(service.nightly(1).await);
            let order = Order { id: 1, customer: "ada".to_owned(), lines: vec![] };
            not_initialized(service.ship(Path(order.id), Json(order)).await);
            not_initialized(service.count((1, 2)).await);
            not_initialized(Scoped::<Fast>(std::marker::PhantomData).run(1).await);
            assert_eq!(req.pair.0, 1);
            not_initialized(service.close().await);
        });
    }
}
