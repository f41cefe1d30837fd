//! Unit tests of the expansion: the generated tokens, without compiling them.

use super::*;
use crate::item::LockFn;
use crate::model::build;
use syn::parse::Parser;

fn expand_str(args: &str, item: &str) -> String {
    let item: LockFn = syn::parse_str(item).unwrap();
    let model = build(syn::parse_str(args), &item).unwrap();
    let tokens = expand(item, model);
    // The output is a well-formed function.
    syn::parse2::<syn::ItemFn>(tokens.clone()).unwrap();
    tokens.to_string()
}

#[test]
fn async_fn() {
    let out = expand_str(
        r#"key = "order:<id>", ttl = "10s", renew"#,
        "/// Docs.\npub async fn settle(id: u64) -> Result<u8, E> { #![allow(unused)] Ok(1) }",
    );
    let expected = quote! {
        #[doc = " Docs."]
        pub async fn settle(id: u64) -> Result<u8, E> {
            #![allow(unused)]
            let __distlock_key = ::distlock::__private::key(
                22usize,
                "order:",
                &[::distlock::__private::part(&(id), "")]
            );
            match ::distlock::__private::lock(__distlock_key)
                .label("order:<id>")
                .ttl(::distlock::__private::StdDuration::from_millis(10000u64))
                .renew(true)
                .run(async move {
                    if let ::core::option::Option::Some(__distlock_never) =
                        ::core::option::Option::None::<Result<u8, E> >
                    {
                        return __distlock_never;
                    }
                    Ok(1)
                })
                .await
            {
                ::core::result::Result::Ok(__distlock_result) => __distlock_result,
                ::core::result::Result::Err(__distlock_error) => ::core::result::Result::Err(
                    ::distlock::__private::lock_error(__distlock_error)
                ),
            }
        }
    };
    assert_eq!(out, expected.to_string());
}

#[test]
fn body_statements_follow_leading_items() {
    let out = expand_str(
        r#"key = "k""#,
        "async fn f() -> Result<u8, E> { const X: u8 = 1; use std::fmt; let y = X; Ok(y) }",
    );
    let body = out.split("async move").nth(1).unwrap();
    assert!(
        body.starts_with(" { const X : u8 = 1 ; use std :: fmt ; if let"),
        "{body}"
    );
    assert!(body.contains("return __distlock_never ; } let y = X ; Ok (y) }"));
}

#[test]
fn skip_wait_client_and_crate() {
    let out = expand_str(
        r#"key = "a<<b:<x>", skip, fenced, min_replicas = 0x2, client = "payments", crate = "my::lock""#,
        "async fn f(x: u8) -> Result<(), E> { Ok(()) }",
    );
    assert!(out.contains(
        "match my :: lock :: __private :: lock_skipping (__distlock_key) . label (\"a<<b:<x>\") . fenced (true) . min_replicas (2usize) . client (\"payments\") . run"
    ), "{out}");
    assert!(out.contains(
        ":: core :: result :: Result :: Err (__distlock_error) if __distlock_error . is_busy () => { :: core :: result :: Result :: Ok (my :: lock :: __private :: skip_default ()) }"
    ));
    assert!(out.contains("Err (my :: lock :: __private :: lock_error (__distlock_error))"));
    assert!(out.contains(
        r#"my :: lock :: __private :: key (20usize , "a<b:" , & [my :: lock :: __private :: part (& (x) , "")])"#
    ));
    let out = expand_str(
        r#"key = "k:<x>-", wait = "2s", min_hold = "1m30s""#,
        "async fn f(x: u8) -> Result<(), E> { Ok(()) }",
    );
    assert!(out
        .contains(r#"key (19usize , "k:" , & [:: distlock :: __private :: part (& (x) , "-")])"#));
    assert!(out.contains(
        ". wait (:: distlock :: __private :: StdDuration :: from_millis (2000u64)) . min_hold (:: distlock :: __private :: StdDuration :: from_millis (90000u64))"
    ));
}

#[test]
fn permits_start_from_a_semaphore() {
    let f = "async fn f(t: u8) -> Result<(), E> { Ok(()) }";
    let out = expand_str(r#"key = "api:<t>", permits = 5, renew"#, f);
    assert!(out.contains(
        "match :: distlock :: __private :: semaphore (__distlock_key , 5u32) . label (\"api:<t>\") . renew (true) . run"
    ), "{out}");
    let out = expand_str(r#"key = "api:<t>", permits = Self::N, skip"#, f);
    assert!(out.contains(
        "__private :: semaphore_skipping (__distlock_key , const { let __distlock_permits : u32 = Self :: N ; :: distlock :: __private :: permits_const (__distlock_permits) })"
    ), "{out}");
}

#[test]
fn read_takes_a_shared_hold() {
    let f = "async fn f(t: u8) -> Result<(), E> { Ok(()) }";
    let out = expand_str(r#"key = "doc:<t>", read, skip"#, f);
    assert!(out.contains(
        "match :: distlock :: __private :: lock_skipping (__distlock_key) . label (\"doc:<t>\") . read () . run"
    ), "{out}");
}

#[test]
fn constant_durations_are_checked_where_they_are_evaluated() {
    let out = expand_str(
        "key = \"k\", ttl = ORDER_TTL, wait = Self::WAIT, min_hold = T::HOLD",
        "async fn f() -> Result<(), E> { Ok(()) }",
    );
    assert!(out.contains(
        ". ttl (const { let __distlock_duration : :: distlock :: __private :: StdDuration = ORDER_TTL ; :: distlock :: __private :: ttl_const (__distlock_duration) })"
    ), "{out}");
    assert!(out
        .contains("= Self :: WAIT ; :: distlock :: __private :: wait_const (__distlock_duration)"));
    assert!(out.contains(
        "= T :: HOLD ; :: distlock :: __private :: min_hold_const (__distlock_duration)"
    ));
}

#[test]
fn impl_trait_return_is_erased() {
    let out = expand_str(
        r#"key = "k""#,
        "async fn f() -> Result<impl Display, E> { Ok(1) }",
    );
    assert!(out.contains(":: core :: option :: Option :: None :: < Result < _ , E > >"));
}

#[test]
fn async_trait_future_is_wrapped() {
    let out = expand_str(
        r#"key = "<id>""#,
        "fn f<'a>(id: u64) -> Pin<Box<dyn Future<Output = Result<(), E>> + Send + 'a>> { Box::pin(async move { let id = id; let n = 1; Ok(()) }) }",
    );
    assert!(out.ends_with(
        "Box :: pin (async move { match :: distlock :: __private :: lock (__distlock_key) . label (\"<id>\") . run (async move { # [allow (unused_variables)] let id = id ; let n = 1 ; Ok (()) }) . await { :: core :: result :: Result :: Ok (__distlock_result) => __distlock_result , :: core :: result :: Result :: Err (__distlock_error) => :: core :: result :: Result :: Err (:: distlock :: __private :: lock_error (__distlock_error)) , } }) }"
    ), "{out}");
    assert!(out.contains(r#"__private :: key (16usize , "" , & ["#));
}

#[test]
fn async_fn_reads_pattern_bound_names_in_place() {
    // In an `async fn` the pattern binds its names before the body: the key reads them as any
    // parameter.
    let out = expand_str(
        r#"key = "order:<id>:<order.customer>""#,
        "async fn settle(Path(id): Path<u64>, Json(order): Json<Order>) -> Result<(), E> { Ok(()) }",
    );
    assert!(out.contains(
        r#"__private :: part (& (id) , ":") , :: distlock :: __private :: part (& (order . customer) , "")"#
    ), "{out}");
}

#[test]
fn async_trait_reads_moved_patterns_through_a_borrow() {
    let item = "fn f<'a>(&'a self, __arg1: Path<u64>, mut __arg2: Json<Order>, __arg3: u8) -> Pin<Box<dyn Future<Output = Result<(), E>> + Send + 'a>> { Box::pin(async move { let __self = self; let Path(id) = { let __arg1 = __arg1; __arg1 }; let Json(Order { id: order_id, ref customer, mut lines, .. }) = { let __arg2 = __arg2; __arg2 }; let __arg3 = __arg3; Ok(()) }) }";
    let out = expand_str(r#"key = "order:<self.region>:<id>:<customer.name>""#, item);
    // The key destructures a borrow of each parameter whose names it reads, before they move,
    // binding only those names.
    assert!(out.contains(
        "let __distlock_key = { let Path (id) = & __arg1 ; let Json (Order { id : _ , customer , lines : _ , .. }) = & __arg2 ; :: distlock :: __private :: key ("
    ), "{out}");
    assert!(out.contains("part (& (self . region) , \":\")"), "{out}");
    // In the block, the names the key reads are marked read, the others left to the lints.
    assert!(
        out.contains("let Path (id) = { let __arg1 = __arg1 ; __arg1 } ; let _ = & id ; let Json"),
        "{out}"
    );
    assert!(out.contains("= { let __arg2 = __arg2 ; __arg2 } ; let _ = & customer ; let __arg3"));
    // A pattern the key does not read is not borrowed.
    let out = expand_str(r#"key = "<self.region>""#, item);
    assert!(out.contains("let __distlock_key = :: distlock"), "{out}");
    assert!(!out.contains("let _ ="));
}

#[test]
fn borrowing_patterns_bind_only_the_names_the_key_reads() {
    let names = |names: &[&str]| -> Vec<Ident> {
        names
            .iter()
            .map(|name| Ident::new(name, Span::call_site()))
            .collect()
    };
    let borrowing = |pat: &str, read: &[&str]| {
        let pat = Pat::parse_single.parse_str(pat).unwrap();
        borrowing_pattern(&pat, &names(read)).map(|pat| pat.into_token_stream().to_string())
    };
    assert_eq!(
        borrowing(
            "(ref mut a, mut b, &c, whole @ (d, _), [e, rest @ ..], S { f, g: ref h, .. })",
            &["a", "c", "d", "rest", "h"]
        )
        .unwrap(),
        "(a , _ , c , (d , _) , [_ , rest @ ..] , S { f : _ , g : h , .. })"
    );
    // An unread identifier pattern is `_`, whether a name or a unit struct (`Z`, irrefutable).
    assert_eq!(
        borrowing("(Ok(x) | Err(x), y @ Z)", &["x", "y"]).unwrap(),
        "(Ok (x) | Err (x) , y @ _)"
    );
    assert_eq!(borrowing("Path(id)", &["other"]), None);
}

#[test]
fn fallback_is_the_function_as_written_with_parameters_allowed_unused() {
    let item: LockFn = syn::parse_str(
        "pub async fn f(id: u64, (a, b): (u8, u8)) -> Result<(), E> { #![allow(unused)] Ok(()) }",
    )
    .unwrap();
    assert_eq!(
        fallback(item).to_string(),
        quote! {
            pub async fn f(#[allow(unused_variables)] id: u64, #[allow(unused_variables)] (a, b): (u8, u8)) -> Result<(), E> {
                #![allow(unused)]
                Ok(())
            }
        }
        .to_string()
    );
    let item: LockFn = syn::parse_str(
        "fn f<'a>(id: u64, __arg1: (u8, u8)) -> Pin<Box<dyn Future<Output = Result<(), E>> + Send + 'a>> { Box::pin(async move { let id = id; let (a, b) = { let __arg1 = __arg1; __arg1 }; Ok(()) }) }",
    )
    .unwrap();
    assert!(fallback(item).to_string().contains(
        "Box :: pin (async move { # [allow (unused_variables)] let id = id ; # [allow (unused_variables)] let (a , b) = { let __arg1 = __arg1 ; __arg1 } ; Ok (()) })"
    ));
}
