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
    let model = build_str(r#"key = "<id>/<name>/<whole.0>/<r#type>""#, item).unwrap();
    assert_eq!(model.keys[0].parts.len(), 7);
    assert!(one_error(r#"key = "<x>""#, item).contains("bound by a destructuring pattern"));
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
        "unknown parameter `user` in the lock key (`<user.id>`); the parameters allow `<self.field>`, `<req>` (for a literal `<`, write `<<`)"
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
    let message = one_error(r#"key = "<x>:<y>:<a>:<b.0>:<self.id>""#, METHOD);
    assert_eq!(
        message.lines().collect::<Vec<_>>(),
        [
            "`<a>`, `<b.0>` in the lock key name `a`, `b`, which are bound by a destructuring pattern; bind the parameter to a name instead (e.g. `pair: (A, B)`, then `<pair.0>`), so the key can be built before the body runs",
            "unknown parameters `x`, `y` in the lock key (`<x>`, `<y>`); the parameters allow `<self.field>`, `<req>` (for a literal `<`, write `<<`)",
        ]
    );
}

#[test]
fn destructured_parameter() {
    let message = one_error(r#"key = "<a>""#, METHOD);
    assert!(message
        .starts_with("`<a>` in the lock key names `a`, which is bound by a destructuring pattern"));
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
    // The positional name is async-trait's, not the user's.
    assert_eq!(
        one_error(r#"key = "<nope>""#, item),
        "unknown parameter `nope` in the lock key (`<nope>`); the parameters allow `<self.field>`, `<id>`; names bound by a destructuring pattern cannot be used, bind the parameter to a name instead (for a literal `<`, write `<<`)"
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
