//! The checked model of one annotated function: options, key template and function shape,
//! validated against each other before any code is generated.

use proc_macro2::{Delimiter, Group, Span, TokenStream};
use quote::{quote, ToTokens};
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream, Parser};
use syn::spanned::Spanned;
use syn::{
    Attribute, Block, Expr, FnArg, GenericArgument, Ident, LitStr, Pat, Path, PathArguments,
    ReturnType, Signature, Stmt, Token, Type, TypeParamBound, Visibility,
};

use crate::attr::{Errors, LockArgs};
use crate::template::{Field, KeyTemplate, Placeholder, Segment, TemplateError};

/// The annotated item, parsed loosely: a body that doesn't parse is kept as tokens so a
/// half-typed function still expands (and rust-analyzer keeps working).
pub(crate) struct LockFn {
    pub(crate) outer_attrs: Vec<Attribute>,
    pub(crate) inner_attrs: Vec<Attribute>,
    pub(crate) vis: Visibility,
    pub(crate) sig: Signature,
    pub(crate) body: Body,
}

/// A function body.
pub(crate) enum Body {
    /// The statements parsed.
    Parsed(Block),
    /// The statements did not parse; the brace group as written.
    Raw(Group),
}

impl ToTokens for Body {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        match self {
            Body::Parsed(block) => block.to_tokens(tokens),
            Body::Raw(group) => group.to_tokens(tokens),
        }
    }
}

impl Parse for LockFn {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let outer_attrs = input.call(Attribute::parse_outer)?;
        let vis: Visibility = input.parse()?;
        let starts_like_fn = input.peek(Token![fn])
            || input.peek(Token![async])
            || input.peek(Token![const])
            || input.peek(Token![unsafe])
            || input.peek(Token![extern]);
        if !starts_like_fn {
            return Err(syn::Error::new(
                Span::call_site(),
                "`#[distributed_lock]` can only be applied to an `async fn`",
            ));
        }
        let sig: Signature = input.parse()?;
        if input.peek(Token![;]) {
            return Err(syn::Error::new(
                input.span(),
                "`#[distributed_lock]` needs a function body: put it on the method in the `impl` block (or on a default method body), not on the trait's declaration",
            ));
        }
        let content;
        let brace = syn::braced!(content in input);
        let inner_attrs = content.call(Attribute::parse_inner)?;
        let tokens: TokenStream = content.parse()?;
        let body = match Block::parse_within.parse2(tokens.clone()) {
            Ok(stmts) => Body::Parsed(Block {
                brace_token: brace,
                stmts,
            }),
            Err(_) => {
                let mut group = Group::new(Delimiter::Brace, tokens);
                group.set_span(brace.span.join());
                Body::Raw(group)
            }
        };
        Ok(LockFn {
            outer_attrs,
            inner_attrs,
            vis,
            sig,
            body,
        })
    }
}

/// Everything `expand.rs` needs, all checked.
pub(crate) struct LockModel {
    /// Path to the `distlock` crate (`crate = "..."`, default `::distlock`).
    pub(crate) krate: Path,
    pub(crate) client: Option<LitStr>,
    pub(crate) ttl_millis: u64,
    pub(crate) renew: bool,
    pub(crate) wait_millis: Option<u64>,
    pub(crate) skip: bool,
    pub(crate) key: Key,
    /// The function's `Result<T, E>` type as written.
    pub(crate) ret: Type,
    pub(crate) shape: Shape,
}

/// The lock key: the template resolved against the function's parameters.
pub(crate) struct Key {
    /// The span of the `key = "..."` literal; errors about values point here.
    pub(crate) span: Span,
    pub(crate) parts: Vec<KeyPart>,
}

/// One piece of the lock key.
pub(crate) enum KeyPart {
    /// Literal text.
    Literal(String),
    /// A value to render: an expression such as `self.tenant` (the root keeps the parameter's own
    /// span), and the first character of the literal that follows it.
    Value {
        expr: TokenStream,
        terminator: Option<char>,
    },
}

/// How the function delivers its future.
pub(crate) enum Shape {
    /// An `async fn`: its body is wrapped.
    AsyncFn,
    /// A method rewritten by `#[async_trait]`: `fn ... -> Pin<Box<dyn Future<Output = R> ...>>`
    /// whose last statement is `Box::pin(async move { ... })`; the async block is wrapped.
    AsyncTrait {
        /// The `Box::pin` path, as async-trait wrote it.
        box_pin: Expr,
        /// The async block.
        future: Expr,
    },
}

/// A function parameter as far as key placeholders are concerned.
enum Param {
    /// `self`, `&self`, `&mut self`, `self: Box<Self>`: the `self` token.
    Receiver(Token![self]),
    /// `name: Type` (also `mut name`, `ref name`, `name @ pattern`).
    Named(Ident),
    /// A name bound inside a destructuring pattern: `(a, b): (u32, u32)`.
    Destructured(Ident),
}

const RESULT_HELP: &str = "`#[distributed_lock]` functions must return `Result<T, E>` (or an alias named `Result`, such as `io::Result<T>` or `anyhow::Result<T>`) where `E: From<distlock::Error>`, so that a lock failure can be returned as an error";

/// Checks the options, the key template and the function against each other.
pub(crate) fn build(args: syn::Result<LockArgs>, item: &LockFn) -> syn::Result<LockModel> {
    let mut errors = Errors::default();
    let args = errors.check(args);

    let (shape, ret) = check_function(item, &mut errors);
    let params = params(&item.sig, matches!(shape, Some(Shape::AsyncTrait { .. })));

    let mut key = None;
    if let Some(args) = &args {
        match &args.key {
            Some(lit) => key = errors.check(resolve_key(lit, &params, &item.sig)),
            None => errors.push(syn::Error::new(
                Span::call_site(),
                "missing `key`: name the lock, e.g. `#[distributed_lock(key = \"order:<id>\")]`",
            )),
        }
        if let (Some(skip), Some(_)) = (args.skip, &args.wait) {
            errors.push(syn::Error::new(
                skip,
                "`skip` cannot be combined with `wait`: `skip` gives up at once when the lock is busy, `wait` waits for it; remove one of them",
            ));
        }
    }
    errors.finish()?;

    // `finish` returned early if any of these is missing: each miss pushed an error.
    let (Some(args), Some(shape), Some(ret), Some(key)) = (args, shape, ret, key) else {
        unreachable!("a missing part always records an error");
    };
    Ok(LockModel {
        krate: args.krate.unwrap_or_else(|| syn::parse_quote!(::distlock)),
        client: args.client,
        ttl_millis: args.ttl.map_or(30_000, |ttl| ttl.millis),
        renew: args.renew.is_some(),
        wait_millis: args.wait.map(|wait| wait.millis),
        skip: args.skip.is_some(),
        key,
        ret,
        shape,
    })
}

/// Checks `const`, `async` and the return type; finds the async-trait shape.
fn check_function(item: &LockFn, errors: &mut Errors) -> (Option<Shape>, Option<Type>) {
    let sig = &item.sig;
    let mut async_trait = None;
    if sig.asyncness.is_none() && sig.constness.is_none() {
        async_trait = async_trait_shape(item);
    }
    // For async-trait, the user's return type is the boxed future's `Output`.
    let ret = match (&async_trait, &sig.output) {
        (Some((_, output)), _) => Ok(output),
        (None, ReturnType::Type(_, ty)) => Ok(&**ty),
        (None, ReturnType::Default) => Err(sig.paren_token.span.close()),
    };
    let shape = if let Some(constness) = sig.constness {
        errors.push(syn::Error::new(
            constness.span,
            "`#[distributed_lock]` cannot be used on a `const fn`: taking a lock talks to Redis at run time; remove `const` and declare the function `async fn`",
        ));
        None
    } else if sig.asyncness.is_some() {
        Some(Shape::AsyncFn)
    } else if let Some((shape, _)) = async_trait {
        Some(shape)
    } else {
        errors.push(syn::Error::new(
            sig.fn_token.span,
            "the `async` keyword is missing from the function declaration: `#[distributed_lock]` holds the lock while the function's future runs, so write `async fn` (with `#[async_trait]`, put `#[distributed_lock]` on the method inside the `#[async_trait]` impl)",
        ));
        None
    };
    let ret = match ret {
        Ok(ty) => errors.check(check_result_type(ty).map(|()| ty.clone())),
        Err(span) => {
            errors.push(syn::Error::new(
                span,
                format!("this function returns `()`: {RESULT_HELP}"),
            ));
            None
        }
    };
    (shape, ret)
}

/// The return type must be spelled `Result<..>` or `path::to::Result<..>`: the check is
/// syntactic, and the type-level asserts in the expansion check `E: From<distlock::Error>`.
fn check_result_type(ty: &Type) -> syn::Result<()> {
    let mut inner = ty;
    while let Type::Group(syn::TypeGroup { elem, .. }) | Type::Paren(syn::TypeParen { elem, .. }) =
        inner
    {
        inner = elem;
    }
    if let Type::Path(path) = inner {
        if let Some(last) = path.path.segments.last() {
            if path.qself.is_none() && last.ident == "Result" {
                if let PathArguments::AngleBracketed(args) = &last.arguments {
                    if !args.args.is_empty() {
                        return Ok(());
                    }
                }
            }
        }
    }
    Err(syn::Error::new_spanned(ty, RESULT_HELP))
}

/// Recognizes a method already rewritten by `#[async_trait]` (which, on the impl block, expands
/// before this attribute): `fn ... -> Pin<Box<dyn Future<Output = R> + Send + 'async_trait>>`
/// whose last statement is `Box::pin(async move { ... })`.
fn async_trait_shape(item: &LockFn) -> Option<(Shape, Type)> {
    let Body::Parsed(block) = &item.body else {
        return None;
    };
    let Some(Stmt::Expr(Expr::Call(call), None)) = block.stmts.last() else {
        return None;
    };
    let Expr::Path(func) = &*call.func else {
        return None;
    };
    let mut segments = func.path.segments.iter().rev();
    let is_box_pin = segments.next().is_some_and(|s| s.ident == "pin")
        && segments.next().is_some_and(|s| s.ident == "Box");
    if !is_box_pin || call.args.len() != 1 {
        return None;
    }
    let future @ Expr::Async(_) = &call.args[0] else {
        return None;
    };
    let ReturnType::Type(_, ty) = &item.sig.output else {
        return None;
    };
    let output = boxed_future_output(ty)?;
    let shape = Shape::AsyncTrait {
        box_pin: (*call.func).clone(),
        future: future.clone(),
    };
    Some((shape, output.clone()))
}

/// `R` in `Pin<Box<dyn Future<Output = R> + ...>>`.
fn boxed_future_output(ty: &Type) -> Option<&Type> {
    let pin = last_segment_args(ty, "Pin")?;
    let boxed = last_segment_args(pin, "Box")?;
    let Type::TraitObject(object) = boxed else {
        return None;
    };
    object.bounds.iter().find_map(|bound| {
        let TypeParamBound::Trait(bound) = bound else {
            return None;
        };
        let future = bound.path.segments.last()?;
        let PathArguments::AngleBracketed(args) = &future.arguments else {
            return None;
        };
        if future.ident != "Future" {
            return None;
        }
        args.args.iter().find_map(|arg| match arg {
            GenericArgument::AssocType(assoc) if assoc.ident == "Output" => Some(&assoc.ty),
            _ => None,
        })
    })
}

/// The first type argument of a path type whose last segment is `name`.
fn last_segment_args<'a>(ty: &'a Type, name: &str) -> Option<&'a Type> {
    let Type::Path(path) = ty else {
        return None;
    };
    let last = path.path.segments.last()?;
    if last.ident != name {
        return None;
    }
    let PathArguments::AngleBracketed(args) = &last.arguments else {
        return None;
    };
    args.args.iter().find_map(|arg| match arg {
        GenericArgument::Type(ty) => Some(ty),
        _ => None,
    })
}

/// The function's parameters. After async-trait, destructured parameters appear as positional
/// `__argN` names, which are hidden from users.
fn params(sig: &Signature, async_trait: bool) -> Vec<Param> {
    let mut params = Vec::new();
    for input in &sig.inputs {
        match input {
            FnArg::Receiver(receiver) => params.push(Param::Receiver(receiver.self_token)),
            FnArg::Typed(typed) => match &*typed.pat {
                Pat::Ident(binding) => {
                    let name = binding.ident.to_string();
                    let positional = name.strip_prefix("__arg").is_some_and(|n| {
                        !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())
                    });
                    if !(async_trait && positional) {
                        params.push(Param::Named(binding.ident.clone()));
                    }
                    if let Some((_, subpat)) = &binding.subpat {
                        destructured(subpat, &mut params);
                    }
                }
                pat => destructured(pat, &mut params),
            },
        }
    }
    params
}

/// The names a destructuring pattern binds.
fn destructured(pat: &Pat, params: &mut Vec<Param>) {
    struct Bindings<'a>(&'a mut Vec<Param>);
    impl<'ast> syn::visit::Visit<'ast> for Bindings<'_> {
        fn visit_pat_ident(&mut self, binding: &'ast syn::PatIdent) {
            self.0.push(Param::Destructured(binding.ident.clone()));
            syn::visit::visit_pat_ident(self, binding);
        }
        // Paths and types inside patterns (`Point { x, .. }`, `Enum::V(a)`) bind nothing.
        fn visit_path(&mut self, _: &'ast Path) {}
        fn visit_type(&mut self, _: &'ast Type) {}
    }
    syn::visit::Visit::visit_pat(&mut Bindings(params), pat);
}

/// Parses the key template and resolves each placeholder to an expression.
fn resolve_key(lit: &LitStr, params: &[Param], sig: &Signature) -> syn::Result<Key> {
    let span = lit.span();
    let template = KeyTemplate::parse(&lit.value())
        .map_err(|error: TemplateError| syn::Error::new(span, error))?;
    let mut errors = Errors::default();
    let mut parts = Vec::with_capacity(template.segments.len());
    for (index, segment) in template.segments.iter().enumerate() {
        match segment {
            Segment::Literal(text) => parts.push(KeyPart::Literal(text.clone())),
            Segment::Placeholder(placeholder) => {
                let terminator = match template.segments.get(index + 1) {
                    Some(Segment::Literal(text)) => text.chars().next(),
                    _ => None,
                };
                let expr = resolve_placeholder(placeholder, params, sig, span)
                    .map_err(|message| syn::Error::new(span, message));
                if let Some(expr) = errors.check(expr) {
                    parts.push(KeyPart::Value { expr, terminator });
                }
            }
        }
    }
    errors.finish()?;
    Ok(Key { span, parts })
}

fn resolve_placeholder(
    placeholder: &Placeholder,
    params: &[Param],
    sig: &Signature,
    span: Span,
) -> Result<TokenStream, String> {
    let root = &placeholder.root;
    let mut expr = if root == "self" {
        let receiver = params.iter().find_map(|param| match param {
            Param::Receiver(token) => Some(token),
            _ => None,
        });
        match receiver {
            Some(token) => token.to_token_stream(),
            None => {
                return Err(format!(
                    "`{placeholder}` in the lock key refers to `self`, but `{}` has no `self` parameter; {}",
                    sig.ident,
                    param_hint(params, sig)
                ))
            }
        }
    } else {
        let found = params.iter().find(|param| match param {
            Param::Named(ident) | Param::Destructured(ident) => ident.unraw() == root.trim_start_matches("r#"),
            Param::Receiver(_) => false,
        });
        match found {
            Some(Param::Named(ident)) => ident.to_token_stream(),
            Some(Param::Destructured(ident)) => {
                return Err(format!(
                    "`{placeholder}` in the lock key names `{ident}`, which is bound by a destructuring pattern; bind the parameter to a name instead (e.g. `pair: (A, B)`, then `<pair.0>`), so the key can be built before the body runs"
                ))
            }
            _ => {
                return Err(format!(
                    "unknown parameter `{root}` in the lock key placeholder `{placeholder}`; {} (for a literal `<`, write `<<`)",
                    param_hint(params, sig)
                ));
            }
        }
    };
    for field in &placeholder.fields {
        let dot = Token![.](span);
        let member = match field {
            Field::Named(name) => match name.strip_prefix("r#") {
                Some(raw) => Ident::new_raw(raw, span).into_token_stream(),
                None => Ident::new(name, span).into_token_stream(),
            },
            Field::Index(index) => syn::Index {
                index: *index,
                span,
            }
            .into_token_stream(),
        };
        expr.extend(quote!(#dot #member));
    }
    Ok(expr)
}

/// The placeholders the function's parameters allow, for error messages.
fn param_hint(params: &[Param], sig: &Signature) -> String {
    let names: Vec<String> = params
        .iter()
        .filter_map(|param| match param {
            Param::Receiver(_) => Some("`<self.field>`".to_owned()),
            Param::Named(ident) => Some(format!("`<{}>`", ident.unraw())),
            Param::Destructured(_) => None,
        })
        .collect();
    if names.is_empty() {
        format!(
            "`{}` has no named parameters, so its key can only be literal text",
            sig.ident
        )
    } else {
        format!("the parameters allow {}", names.join(", "))
    }
}
