//! Unit tests of the model: option, template and function checks, without compiling code.

use super::*;

fn build_str(args: &str, item: &str) -> syn::Result<LockModel> {
    let item: LockFn = syn::parse_str(item).expect("item parses");
    build(syn::parse_str(args), &item)
}

fn errors(args: &str, item: &str) -> Vec<String> {
    match build_str(args, item) {
        Ok(_) => panic!("no error for `{args}` on `{item}`"),
        Err(error) => error.into_iter().map(|e| e.to_string()).collect(),
    }
}

fn one_error(args: &str, item: &str) -> String {
    let mut errors = errors(args, item);
    assert_eq!(errors.len(), 1, "{errors:#?}");
    errors.remove(0)
}

fn rendered(model: &LockModel) -> Vec<String> {
    model.keys[0]
        .parts
        .iter()
        .map(|part| match part {
            KeyPart::Literal(text) => format!("lit {text}"),
            KeyPart::Value { expr, terminator } => format!("val {expr} {terminator:?}"),
        })
        .collect()
}

const METHOD: &str =
    "async fn update(&self, req: &Request, (a, b): (u8, u8)) -> Result<(), E> { Ok(()) }";

#[test]
fn resolves_placeholders_and_options() {
    let model = build_str(
        r#"key = "user:<self.tenant>:<req.user_id.0>", ttl = "500ms", wait = "2s", client = "payments""#,
        METHOD,
    )
    .unwrap();
    assert_eq!(
        rendered(&model),
        [
            "lit user:",
            "val self . tenant Some(':')",
            "lit :",
            "val req . user_id . 0 None"
        ]
    );
    assert_eq!(model.ttl, Some(DurationArg::Millis(500)));
    assert_eq!(model.wait, Some(DurationArg::Millis(2_000)));
    assert_eq!(model.keys[0].params, ["req"]);
    assert!(!model.renew && !model.skip && !model.fenced);
    assert_eq!(model.client.unwrap().value(), "payments");
    assert_eq!(model.krate.to_token_stream().to_string(), ":: distlock");
    assert!(matches!(model.shape, Shape::AsyncFn));
}

#[test]
fn defaults() {
    let model = build_str(
        r#"key = "nightly""#,
        "async fn nightly() -> anyhow::Result<()> { Ok(()) }",
    )
    .unwrap();
    assert_eq!(model.ttl, None, "the client default applies");
    assert_eq!(model.wait, None);
    assert!(model.client.is_none());
}

#[test]
fn parameter_patterns() {
    let item = "async fn f(mut id: u64, ref name: String, whole @ (x, _): (u8, u8), r#type: u8) -> Result<(), E> { Ok(()) }";
    let model = build_str(r#"key = "<id>/<name>/<whole.0>/<r#type>/<x>""#, item).unwrap();
    assert_eq!(model.keys[0].parts.len(), 9);
    assert_eq!(model.keys[0].params, ["id", "name", "whole", "r#type", "x"]);
}

/// An axum handler as written: every name a parameter's pattern binds is a parameter.
const HANDLER: &str = "async fn settle(Path(id): Path<u64>, State(app): State<App>, Json(Order { id: order_id, customer, .. }): Json<Order>, (a, (b, _)): (u8, (u8, u8)), Pair(ref r, mut m): Pair, Query(ref mut q): Query<Q>, [first, rest @ ..]: [u8; 3], mut plain: u64, _: Extension<u8>) -> Result<(), E> { Ok(()) }";

#[test]
fn names_bound_by_patterns_are_parameters() {
    let model = build_str(
        r#"key = "o:<id>:<app.region>:<order_id>:<customer.name>:<a>-<b>:<r>-<m>:<q>:<first>:<rest.len>:<plain>""#,
        HANDLER,
    )
    .unwrap();
    assert_eq!(
        model.keys[0].params,
        ["id", "app", "order_id", "customer", "a", "b", "r", "m", "q", "first", "rest", "plain"]
    );
    let values: Vec<String> = rendered(&model)
        .into_iter()
        .filter(|part| part.starts_with("val"))
        .collect();
    assert_eq!(values[1], "val app . region Some(':')");
    assert_eq!(values[3], "val customer . name Some(':')");
    // A key list reads them too.
    let model = build_str(r#"key = ["order:<id>", "customer:<customer>"]"#, HANDLER).unwrap();
    assert_eq!(model.keys[1].params, ["customer"]);
}

#[test]
fn pattern_paths_fields_and_wildcards_bind_nothing() {
    // `Path`, `Order`, the field `id` (renamed `order_id`), `_` and `..` are not names.
    assert_eq!(
        one_error(r#"key = "<Path>:<Order>:<Extension>""#, HANDLER),
        "unknown parameters `Path`, `Order`, `Extension` in the lock key (`<Path>`, `<Order>`, `<Extension>`); the parameters allow `<id>`, `<app>`, `<order_id>`, `<customer>`, `<a>`, `<b>`, `<r>`, `<m>`, `<q>`, `<first>`, `<rest>`, `<plain>` (for a literal `<`, write `<<`)"
    );
    assert!(one_error(
        r#"key = "<id>""#,
        "async fn f(Path(_): Path<u64>, Order { .. }: Order) -> Result<(), E> { Ok(()) }"
    )
    .contains("`f` has no named parameters, so its key can only be literal text"));
}

#[test]
fn unknown_parameter_suggests_a_name_bound_by_a_pattern() {
    assert_eq!(
        one_error(r#"key = "order:<ordr_id>""#, HANDLER),
        "unknown parameter `ordr_id` in the lock key (`<ordr_id>`): did you mean `<order_id>`? (the parameters allow `<id>`, `<app>`, `<order_id>`, `<customer>`, `<a>`, `<b>`, `<r>`, `<m>`, `<q>`, `<first>`, `<rest>`, `<plain>`; for a literal `<`, write `<<`)"
    );
    assert!(one_error(r#"key = "<cutsomer.name>""#, HANDLER)
        .contains("did you mean `<customer.name>`?"));
}

#[test]
fn template_errors_point_at_the_key() {
    assert!(one_error(r#"key = "a:<>""#, METHOD).starts_with("empty placeholder"));
    assert!(one_error(r#"key = "a:<id""#, METHOD).starts_with("unclosed placeholder"));
    assert!(one_error(r#"key = "<req><a>""#, METHOD).contains("next to each other"));
}

#[test]
fn unknown_parameter_lists_the_available_ones() {
    assert_eq!(
        one_error(r#"key = "<user.id>""#, METHOD),
        "unknown parameter `user` in the lock key (`<user.id>`); the parameters allow `<self.field>`, `<req>`, `<a>`, `<b>` (for a literal `<`, write `<<`)"
    );
    assert!(one_error(
        r#"key = "<id>""#,
        "async fn f() -> Result<(), E> { Ok(()) }"
    )
    .contains("`f` has no named parameters, so its key can only be literal text"));
}

#[test]
fn unknown_parameter_suggests_the_closest_one() {
    let item = "async fn f(&self, id: u64, user_id: u64, r#type: u8) -> Result<(), E> { Ok(()) }";
    assert_eq!(
        one_error(r#"key = "a:<idd>""#, item),
        "unknown parameter `idd` in the lock key (`<idd>`): did you mean `<id>`? (the parameters allow `<self.field>`, `<id>`, `<user_id>`, `<r#type>`; for a literal `<`, write `<<`)"
    );
    // The fields stay; `self` and raw identifiers are suggested as they must be written.
    assert!(one_error(r#"key = "<usr_id.x.0>""#, item).contains("did you mean `<user_id.x.0>`?"));
    assert!(one_error(r#"key = "<slef.tenant>""#, item).contains("did you mean `<self.tenant>`?"));
    assert!(one_error(r#"key = "<typ>""#, item).contains("did you mean `<r#type>`?"));
    assert!(one_error(r#"key = "<a>:<usr_id>""#, item)
        .contains("did you mean `<user_id>` for `<usr_id>`? (the parameters allow"));
    // Too far from every name: no guess.
    assert!(one_error(r#"key = "<order>""#, item).contains("(`<order>`); the parameters allow"));
}

#[test]
fn braces_in_the_key_are_refused() {
    assert!(one_error(r#"key = "hash:{id}""#, METHOD)
        .starts_with("`{id}` in the lock key: placeholders are written `<id>`, not `{id}`"));
}

#[test]
fn placeholder_mistakes_are_all_reported_in_one_error() {
    let message = one_error(
        r#"key = "<x>:<zzz>:<a>:<b.0>:<self.id>""#,
        "async fn f(x: u8, (a, b): (u8, (u8,))) -> Result<(), E> { Ok(()) }",
    );
    assert_eq!(
        message.lines().collect::<Vec<_>>(),
        [
            "`<self.id>` in the lock key refers to `self`, but `f` has no `self` parameter; the parameters allow `<x>`, `<a>`, `<b>`",
            "unknown parameter `zzz` in the lock key (`<zzz>`); the parameters allow `<x>`, `<a>`, `<b>` (for a literal `<`, write `<<`)",
        ]
    );
}

#[test]
fn self_without_receiver() {
    let message = one_error(
        r#"key = "<self.id>""#,
        "async fn f(id: u64) -> Result<(), E> { Ok(()) }",
    );
    assert_eq!(
        message,
        "`<self.id>` in the lock key refers to `self`, but `f` has no `self` parameter; the parameters allow `<id>`"
    );
}

#[test]
fn an_error_type_that_is_a_type_parameter_is_told_apart() {
    let is_param = |f: &str| build_str(r#"key = "k""#, f).unwrap().ret.err_is_param;
    assert!(is_param("async fn f<E>() -> Result<u8, E> { Ok(1) }"));
    assert!(is_param(
        "async fn f<T, E: Send>() -> Result<T, E> { todo!() }"
    ));
    assert!(!is_param(
        "async fn f<E>() -> Result<u8, AppError> { Ok(1) }"
    ));
    assert!(!is_param("async fn f() -> Result<u8, E> { Ok(1) }"));
    assert!(!is_param(
        "async fn f<E>() -> anyhow::Result<E> { todo!() }"
    ));
}

#[test]
fn return_type_spans() {
    let model = build_str(
        r#"key = "k""#,
        "async fn f() -> anyhow::Result<u8> { Ok(1) }",
    )
    .unwrap();
    // No `E` spelled out: errors about it point at the whole type.
    assert_eq!(
        format!("{:?}", model.ret.err_span),
        format!("{:?}", model.ret.ty.span())
    );
}

#[test]
fn constant_durations() {
    let model = build_str("key = \"k\", ttl = ORDER_TTL, wait = Self::WAIT", METHOD).unwrap();
    assert!(matches!(model.ttl, Some(DurationArg::Const(_))));
    assert!(matches!(model.wait, Some(DurationArg::Const(_))));
}

#[test]
fn function_shape_errors() {
    assert!(
        one_error(r#"key = "k""#, "fn f() -> Result<(), E> { Ok(()) }")
            .starts_with("the `async` keyword is missing from the function declaration")
    );
    assert!(
        one_error(r#"key = "k""#, "const fn f() -> Result<(), E> { Ok(()) }")
            .contains("cannot be used on a `const fn`")
    );
    assert!(
        one_error(r#"key = "k""#, "async fn f() -> Option<()> { None }")
            .starts_with("`#[distributed_lock]` functions must return `Result<T, E>`")
    );
    assert!(
        one_error(r#"key = "k""#, "async fn f() -> Result { todo!() }")
            .starts_with("`#[distributed_lock]` functions must return `Result<T, E>`")
    );
    assert!(one_error(r#"key = "k""#, "async fn f() {}").starts_with("this function returns `()`"));
    // Aliases named `Result` are accepted.
    build_str(
        r#"key = "k""#,
        "async fn f() -> std::io::Result<u8> { Ok(1) }",
    )
    .unwrap();
    build_str(r#"key = "k""#, "async fn f() -> (Result<u8, E>) { Ok(1) }").unwrap();
}

#[test]
fn option_combinations() {
    assert_eq!(
        one_error("ttl = \"1s\"", METHOD),
        "missing `key`: name the lock, e.g. `#[distributed_lock(key = \"order:<id>\")]`"
    );
    assert!(one_error(r#"key = "k", wait = "1s", skip"#, METHOD)
        .starts_with("`skip` cannot be combined with `wait`"));
}

#[test]
fn independent_mistakes_combine() {
    let errors = errors(r#"key = "<nope>", foo"#, "fn f() -> u8 { 1 }");
    // The unknown option stops option parsing, so the key is not checked.
    assert_eq!(errors.len(), 3, "{errors:#?}");
}

#[test]
fn async_trait_shape() {
    let item = r#"
        fn settle<'life0, 'async_trait>(&'life0 self, id: u64, __arg1: (u8, u8))
            -> ::core::pin::Pin<Box<dyn ::core::future::Future<Output = Result<u8, E>> + ::core::marker::Send + 'async_trait>>
        where 'life0: 'async_trait, Self: 'async_trait
        {
            Box::pin(async move {
                if let ::core::option::Option::Some(__ret) = ::core::option::Option::None::<Result<u8, E>> {
                    #[allow(unreachable_code)]
                    return __ret;
                }
                let __self = self;
                let id = id;
                let (a, b) = { let __arg1 = __arg1; __arg1 };
                let __ret: Result<u8, E> = { Ok(1) };
                #[allow(unreachable_code)]
                __ret
            })
        }
    "#;
    let model = build_str(r#"key = "<self.region>:<id>""#, item).unwrap();
    assert!(matches!(model.shape, Shape::AsyncTrait { .. }));
    assert_eq!(
        model.ret.ty.to_token_stream().to_string(),
        "Result < u8 , E >"
    );
    // The positional name is async-trait's, not the user's; its pattern's names are parameters.
    assert_eq!(
        one_error(r#"key = "<nope>""#, item),
        "unknown parameter `nope` in the lock key (`<nope>`); the parameters allow `<self.field>`, `<id>`, `<a>`, `<b>` (for a literal `<`, write `<<`)"
    );
    let model = build_str(r#"key = "<b>:<id>""#, item).unwrap();
    assert_eq!(model.keys[0].params, ["b", "id"]);
    let Shape::AsyncTrait { moved, .. } = &model.shape else {
        panic!("async-trait shape")
    };
    assert_eq!(moved.len(), 1);
    assert_eq!(moved[0].arg.to_string(), "__arg1");
    assert_eq!(moved[0].pat.to_token_stream().to_string(), "(a , b)");
    // A pattern whose binding in the block is not recognized cannot be read.
    let unknown = item.replace("let (a, b) = { let __arg1 = __arg1; __arg1 };", "");
    assert!(one_error(r#"key = "<a>""#, &unknown).contains(
        "the parameters allow `<self.field>`, `<id>`; the names of a parameter pattern that `#[async_trait]` rewrote could not be found"
    ));
    // A `_` parameter (`let __arg2 = __arg2;`) binds nothing, and is no unknown pattern.
    let wildcard = item
        .replace("__arg1: (u8, u8))", "__arg1: (u8, u8), __arg2: u8)")
        .replace("let id = id;", "let id = id; let __arg2 = __arg2;");
    assert_eq!(
        one_error(r#"key = "<nope>""#, &wildcard),
        "unknown parameter `nope` in the lock key (`<nope>`); the parameters allow `<self.field>`, `<id>`, `<a>`, `<b>` (for a literal `<`, write `<<`)"
    );
    // A plain `fn` returning a boxed future is not mistaken for async-trait output.
    assert!(one_error(
        r#"key = "k""#,
        "fn f() -> Pin<Box<dyn Future<Output = Result<(), E>>>> { Box::pin(make()) }"
    )
    .starts_with("the `async` keyword is missing"));
    assert!(one_error(
        r#"key = "k""#,
        "fn f() -> impl Future<Output = Result<(), E>> + Send { make() }"
    )
    .starts_with("the `async` keyword is missing"));
    assert_eq!(
        errors(
            r#"key = "k""#,
            "fn f() -> impl Future<Output = u8> { make() }"
        )
        .len(),
        2
    );
}
