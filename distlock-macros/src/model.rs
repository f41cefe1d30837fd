//! The checked model of one annotated function: options, key template and function shape,
//! validated against each other before any code is generated.

use proc_macro2::{Span, TokenStream};
use quote::{quote, ToTokens};
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::{
    Expr, FnArg, Ident, LitStr, Pat, Path, PathArguments, ReturnType, Signature, Token, Type,
};

use crate::attr::{DurationArg, Errors, KeyArg, LockArgs, PermitsArg};
use crate::item::{
    async_trait_body, future_output, is_positional, pattern_names, LockFn, MovedPattern,
};
use crate::similar;
use crate::template::{Field, KeyTemplate, Placeholder, Segment, TemplateError};

/// Everything `expand.rs` needs, all checked.
pub(crate) struct LockModel {
    /// Path to the `distlock` crate (`crate = "..."`, default `::distlock`).
    pub(crate) krate: Path,
    pub(crate) client: Option<LitStr>,
    /// `permits = N`: one of a semaphore's permits instead of the lock.
    pub(crate) permits: Option<PermitsArg>,
    /// `read`: a shared (read) hold of the lock.
    pub(crate) read: bool,
    /// `None`: the client's `default_ttl` applies.
    pub(crate) ttl: Option<DurationArg>,
    pub(crate) renew: bool,
    pub(crate) wait: Option<DurationArg>,
    pub(crate) min_hold: Option<DurationArg>,
    pub(crate) skip: bool,
    /// `fenced`: the lock hands out a fencing token.
    pub(crate) fenced: bool,
    /// `min_replicas = N` or `= all`: replicas that must acknowledge the acquire and each
    /// renewal.
    pub(crate) min_replicas: Option<crate::attr::Replicas>,
    /// The lock key; several with `key = [...]` (a set of locks taken together).
    pub(crate) keys: Vec<Key>,
    /// `key = [...]`: the locks are taken together (`lock_all`), even if one remained.
    pub(crate) key_list: bool,
    /// The metrics label: the key template as written (`[a, b]` for a list).
    pub(crate) label: String,
    /// The function's return type as written.
    pub(crate) ret: ResultType,
    pub(crate) shape: Shape,
}

/// The function's `Result<T, E>` type, with the places errors about `T` and `E` point at.
pub(crate) struct ResultType {
    /// As written.
    pub(crate) ty: Type,
    /// `T`, or the whole type when it is an alias without it spelled out.
    pub(crate) ok_span: Span,
    /// `E`, or the whole type when it is an alias such as `anyhow::Result<T>`.
    pub(crate) err_span: Span,
    /// `E` is a type parameter of the function: its check suggests the bound to add.
    pub(crate) err_is_param: bool,
}

/// The lock key: the template resolved against the function's parameters.
pub(crate) struct Key {
    /// The span of the `key = "..."` literal; errors about values point here.
    pub(crate) span: Span,
    /// The template as written (`order:<id>`): the `lock` label of the lock's metrics.
    pub(crate) template: String,
    pub(crate) parts: Vec<KeyPart>,
    /// The names the key reads, parameters and names bound by parameter patterns (not `self`).
    pub(crate) params: Vec<Ident>,
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
        box_pin: Box<Expr>,
        /// The async block.
        future: Box<Expr>,
        /// The parameter patterns async-trait moved into the block (`Path(id)` for `__arg1`):
        /// the key reads their names by destructuring a borrow of `__argN` before it moves.
        moved: Vec<MovedPattern>,
    },
}

/// A function parameter as far as key placeholders are concerned.
enum Param {
    /// `self`, `&self`, `&mut self`, `self: Box<Self>`: the `self` token.
    Receiver(Token![self]),
    /// A name a parameter binds: `name: Type` (also `mut name`, `ref name`), or a name bound by
    /// its pattern (`id` in `Path(id): Path<u64>`, `a` in `(a, b): (u32, u32)`, both `whole`
    /// and `x` in `whole @ (x, _)`).
    Named(Ident),
    /// A pattern that async-trait replaced with a positional `__argN` name and whose binding in
    /// its block was not recognized: the names it binds cannot be seen.
    Positional,
}

const RESULT_HELP: &str = "`#[distributed_lock]` functions must return `Result<T, E>` (or an alias named `Result`, such as `anyhow::Result<T>`) where `E: From<distlock::Error>`, so that a lock failure can be returned as an error";

/// Checks the options, the key template and the function against each other.
pub(crate) fn build(args: syn::Result<LockArgs>, item: &LockFn) -> syn::Result<LockModel> {
    let mut errors = Errors::default();
    let args = errors.check(args);

    let (shape, ret) = check_function(item, &mut errors);
    let moved = match &shape {
        Some(Shape::AsyncTrait { moved, .. }) => Some(&moved[..]),
        _ => None,
    };
    let params = params(&item.sig, moved);

    let mut key = None;
    if let Some(args) = &args {
        match &args.key {
            Some(arg) => {
                let keys: Vec<Option<Key>> = arg
                    .templates()
                    .iter()
                    .map(|lit| errors.check(resolve_key(lit, &params, &item.sig)))
                    .collect();
                key = keys.into_iter().collect::<Option<Vec<Key>>>();
                if let KeyArg::List(_) = arg {
                    check_key_list(args, &mut errors);
                }
            }
            None => errors.push(syn::Error::new(
                Span::call_site(),
                "missing `key`: name the lock, e.g. `#[distributed_lock(key = \"order:<id>\")]`",
            )),
        }
        if let (Some(read), Some(_)) = (args.read, &args.permits) {
            errors.push(syn::Error::new(
                read,
                "`read` cannot be combined with `permits`: `read` shares the lock among readers (and excludes writers), `permits` limits how many bodies run at once; remove one of them",
            ));
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
    let (Some(args), Some(shape), Some(ret), Some(keys)) = (args, shape, ret, key) else {
        unreachable!("a missing part always records an error");
    };
    let key_list = matches!(args.key, Some(KeyArg::List(_)));
    let label = match key_list {
        true => {
            let templates: Vec<&str> = keys.iter().map(|k| k.template.as_str()).collect();
            format!("[{}]", templates.join(", "))
        }
        false => keys[0].template.clone(),
    };
    Ok(LockModel {
        krate: args.krate.unwrap_or_else(|| syn::parse_quote!(::distlock)),
        client: args.client,
        permits: args.permits,
        read: args.read.is_some(),
        ttl: args.ttl,
        renew: args.renew.is_some(),
        wait: args.wait,
        min_hold: args.min_hold,
        skip: args.skip.is_some(),
        fenced: args.fenced.is_some(),
        min_replicas: args.min_replicas,
        keys,
        key_list,
        label,
        ret,
        shape,
    })
}

/// A key list takes exclusive locks only: `permits` and `read` next to it are an error each, at
/// its name.
fn check_key_list(args: &LockArgs, errors: &mut Errors) {
    if let Some(span) = args.permits_span {
        errors.push(syn::Error::new(
            span,
            "`permits` cannot be combined with a key list: a set of locks is taken exclusively, all or none; use one key with `permits`, or remove `permits`",
        ));
    }
    if let Some(read) = args.read {
        errors.push(syn::Error::new(
            read,
            "`read` cannot be combined with a key list: a set of locks is taken exclusively, all or none; use one key with `read`, or remove `read`",
        ));
    }
}

/// Checks `const`, `async` and the return type; finds the async-trait shape.
fn check_function(item: &LockFn, errors: &mut Errors) -> (Option<Shape>, Option<ResultType>) {
    let sig = &item.sig;
    let async_trait = async_trait_body(item);
    let ret = match (&async_trait, &sig.output) {
        // After async-trait, the user's return type is the boxed future's `Output`.
        (Some(body), _) => Ok(body.output.clone()),
        // A hand-written future-returning `fn`: the `async` error covers it, so check the
        // future's output rather than report the future type as a second mistake.
        (None, ReturnType::Type(_, ty)) if sig.asyncness.is_none() => {
            Ok(future_output(ty).unwrap_or(ty).clone())
        }
        (None, ReturnType::Type(_, ty)) => Ok((**ty).clone()),
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
    } else if let Some(body) = async_trait {
        Some(Shape::AsyncTrait {
            box_pin: body.box_pin,
            future: body.future,
            moved: body.moved,
        })
    } else {
        errors.push(syn::Error::new(
            sig.fn_token.span,
            "the `async` keyword is missing from the function declaration: `#[distributed_lock]` holds the lock while the function's future runs, so write `async fn` (with `#[async_trait]`, put `#[distributed_lock]` on the method inside the `#[async_trait]` impl)",
        ));
        None
    };
    let ret = match ret {
        Ok(ty) => errors.check(check_result_type(ty)).map(|mut ret| {
            ret.err_is_param = err_is_param(&ret.ty, sig);
            ret
        }),
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

/// True if the error type of `ty` (`Result<T, E>`) is one of the function's type parameters.
fn err_is_param(ty: &Type, sig: &Signature) -> bool {
    let Type::Path(path) = ty else { return false };
    let Some(PathArguments::AngleBracketed(args)) =
        path.path.segments.last().map(|last| &last.arguments)
    else {
        return false;
    };
    let Some(syn::GenericArgument::Type(Type::Path(err))) = args
        .args
        .iter()
        .filter(|arg| matches!(arg, syn::GenericArgument::Type(_)))
        .nth(1)
    else {
        return false;
    };
    err.qself.is_none()
        && err
            .path
            .get_ident()
            .is_some_and(|ident| sig.generics.type_params().any(|p| p.ident == *ident))
}

/// The return type must be spelled `Result<..>` or `path::to::Result<..>`: the check is
/// syntactic; the generated code has the compiler check `E: From<distlock::Error>` (and, with
/// `skip`, `T: Default`) at `E` and `T`.
fn check_result_type(ty: Type) -> syn::Result<ResultType> {
    let mut inner = &ty;
    while let Type::Group(syn::TypeGroup { elem, .. }) | Type::Paren(syn::TypeParen { elem, .. }) =
        inner
    {
        inner = elem;
    }
    if let Type::Path(path) = inner {
        if let Some(last) = path.path.segments.last() {
            if path.qself.is_none() && last.ident == "Result" {
                if let PathArguments::AngleBracketed(args) = &last.arguments {
                    let mut types = args.args.iter().filter_map(|arg| match arg {
                        syn::GenericArgument::Type(ty) => Some(ty.span()),
                        _ => None,
                    });
                    if let Some(ok_span) = types.next() {
                        let err_span = types.next().unwrap_or_else(|| ty.span());
                        return Ok(ResultType {
                            ok_span,
                            err_span,
                            err_is_param: false,
                            ty,
                        });
                    }
                }
            }
        }
    }
    Err(syn::Error::new_spanned(ty, RESULT_HELP))
}

/// The function's parameters and the names their patterns bind. After async-trait (`moved` is
/// `Some`), a parameter written as a pattern is a positional `__argN`, hidden from users; its
/// names are those of its pattern in async-trait's block.
fn params(sig: &Signature, moved: Option<&[MovedPattern]>) -> Vec<Param> {
    let mut params = Vec::new();
    for input in &sig.inputs {
        match input {
            FnArg::Receiver(receiver) => params.push(Param::Receiver(receiver.self_token)),
            FnArg::Typed(typed) => match (&*typed.pat, moved) {
                (Pat::Ident(binding), Some(moved)) if is_positional(&binding.ident) => {
                    match moved.iter().find(|pattern| pattern.arg == binding.ident) {
                        Some(pattern) => bound(&pattern.pat, &mut params),
                        None => params.push(Param::Positional),
                    }
                }
                (pat, _) => bound(pat, &mut params),
            },
        }
    }
    params
}

/// The names a parameter's pattern binds, as parameters.
fn bound(pat: &Pat, params: &mut Vec<Param>) {
    params.extend(pattern_names(pat).into_iter().map(Param::Named));
}

/// Parses the key template and resolves each placeholder to an expression.
fn resolve_key(lit: &LitStr, params: &[Param], sig: &Signature) -> syn::Result<Key> {
    let span = lit.span();
    let template = KeyTemplate::parse(&lit.value())
        .map_err(|error: TemplateError| syn::Error::new(span, error))?;
    let mut problems = Problems::default();
    let mut parts = Vec::with_capacity(template.segments.len());
    let mut used = Vec::new();
    for (index, segment) in template.segments.iter().enumerate() {
        match segment {
            Segment::Literal(text) => parts.push(KeyPart::Literal(text.clone())),
            Segment::Placeholder(placeholder) => {
                let terminator = match template.segments.get(index + 1) {
                    Some(Segment::Literal(text)) => text.chars().next(),
                    _ => None,
                };
                if let Some((expr, param)) =
                    resolve_placeholder(placeholder, params, span, &mut problems)
                {
                    parts.push(KeyPart::Value { expr, terminator });
                    used.extend(param.filter(|param| !used.contains(param)));
                }
            }
        }
    }
    match problems.message(params, sig) {
        Some(message) => Err(syn::Error::new(span, message)),
        None => Ok(Key {
            span,
            template: lit.value(),
            parts,
            params: used,
        }),
    }
}

/// Placeholders that name nothing usable, grouped by what is wrong with them. They all share the
/// key literal's span, so they are reported as one error: one line per kind of mistake.
#[derive(Default)]
struct Problems {
    /// `<self...>` without a receiver.
    no_receiver: Vec<String>,
    /// Placeholder and its unknown root.
    unknown: Vec<(String, String)>,
}

impl Problems {
    fn message(&self, params: &[Param], sig: &Signature) -> Option<String> {
        let list = |items: &mut dyn Iterator<Item = &String>| {
            items
                .map(|item| format!("`{item}`"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut lines = Vec::new();
        if !self.no_receiver.is_empty() {
            lines.push(format!(
                "{} in the lock key {} `self`, but `{}` has no `self` parameter; {}",
                list(&mut self.no_receiver.iter()),
                if self.no_receiver.len() == 1 {
                    "refers to"
                } else {
                    "refer to"
                },
                sig.ident,
                param_hint(params, sig)
            ));
        }
        if !self.unknown.is_empty() {
            let positional = if params.iter().any(|p| matches!(p, Param::Positional)) {
                "; the names of a parameter pattern that `#[async_trait]` rewrote could not be found in its output (an async-trait version this attribute does not know), so they cannot be used: bind that parameter to a name instead"
            } else {
                ""
            };
            let suggestions: Vec<String> = self
                .unknown
                .iter()
                .filter_map(|(placeholder, root)| {
                    let better = closest(root, params)?;
                    // Same placeholder with the root corrected: `<idd.x>` -> `<id.x>`.
                    let fixed = format!("<{better}{}", &placeholder[1 + root.len()..]);
                    Some(if self.unknown.len() == 1 {
                        format!("`{fixed}`")
                    } else {
                        format!("`{fixed}` for `{placeholder}`")
                    })
                })
                .collect();
            let unknown = format!(
                "unknown parameter{} {} in the lock key ({})",
                if self.unknown.len() == 1 { "" } else { "s" },
                list(&mut self.unknown.iter().map(|(_, root)| root)),
                list(&mut self.unknown.iter().map(|(placeholder, _)| placeholder)),
            );
            let hint = format!("{}{positional}", param_hint(params, sig));
            lines.push(if suggestions.is_empty() {
                format!("{unknown}; {hint} (for a literal `<`, write `<<`)")
            } else {
                format!(
                    "{unknown}: did you mean {}? ({hint}; for a literal `<`, write `<<`)",
                    suggestions.join(", ")
                )
            });
        }
        (!lines.is_empty()).then(|| lines.join("\n"))
    }
}

/// The expression a placeholder stands for: the parameter (or `self`) with the user's own span,
/// then the fields, spanned at the key; and the parameter it reads (`None` for `self`).
fn resolve_placeholder(
    placeholder: &Placeholder,
    params: &[Param],
    span: Span,
    problems: &mut Problems,
) -> Option<(TokenStream, Option<Ident>)> {
    let root = &placeholder.root;
    let mut param = None;
    let mut expr = if root == "self" {
        let receiver = params.iter().find_map(|param| match param {
            Param::Receiver(token) => Some(token),
            _ => None,
        });
        let Some(token) = receiver else {
            problems.no_receiver.push(placeholder.to_string());
            return None;
        };
        token.to_token_stream()
    } else {
        let found = params.iter().find_map(|param| match param {
            Param::Named(ident) => {
                (ident.unraw() == root.trim_start_matches("r#")).then_some(ident)
            }
            Param::Receiver(_) | Param::Positional => None,
        });
        match found {
            Some(ident) => {
                param = Some(ident.clone());
                ident.to_token_stream()
            }
            None => {
                problems
                    .unknown
                    .push((placeholder.to_string(), root.clone()));
                return None;
            }
        }
    };
    // Only *located* at the key literal, in the macro's context: rustc reports a misspelt field
    // there ("no field `idx` on type `Order`"), but offers no fix-it. At the literal itself it
    // would suggest replacing the whole key string with the field's name (`key = id`), which
    // breaks the code if applied.
    let at = Span::mixed_site().located_at(span);
    for field in &placeholder.fields {
        let dot = Token![.](at);
        let member = match field {
            Field::Named(name) => match name.strip_prefix("r#") {
                Some(raw) => Ident::new_raw(raw, at).into_token_stream(),
                None => Ident::new(name, at).into_token_stream(),
            },
            Field::Index(index) => syn::Index {
                index: *index,
                span: at,
            }
            .into_token_stream(),
        };
        expr.extend(quote!(#dot #member));
    }
    Some((expr, param))
}

/// The parameter (or `self`) whose name is closest to `root`, if it is close enough to be what
/// was meant (see `similar::closest`).
fn closest(root: &str, params: &[Param]) -> Option<String> {
    let root = root.trim_start_matches("r#");
    let candidates = params.iter().filter_map(|param| match param {
        Param::Receiver(_) => Some(("self".to_owned(), "self".to_owned())),
        // Compared without `r#`, suggested as the template must spell it.
        Param::Named(ident) => Some((ident.unraw().to_string(), ident.to_string())),
        Param::Positional => None,
    });
    similar::closest(root, candidates)
}

/// The placeholders the function's parameters allow, for error messages.
fn param_hint(params: &[Param], sig: &Signature) -> String {
    let names: Vec<String> = params
        .iter()
        .filter_map(|param| match param {
            Param::Receiver(_) => Some("`<self.field>`".to_owned()),
            // As the template must spell it: `<r#type>`.
            Param::Named(ident) => Some(format!("`<{ident}>`")),
            Param::Positional => None,
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

#[cfg(test)]
mod tests;
