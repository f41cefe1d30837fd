//! The annotated item, parsed loosely, and recognition of what `#[async_trait]` made of it.

use proc_macro2::{Delimiter, Group, Span, TokenStream};
use quote::ToTokens;
use syn::parse::{Parse, ParseStream, Parser};
use syn::{
    Attribute, Block, Expr, GenericArgument, Ident, Local, Pat, PathArguments, ReturnType,
    Signature, Stmt, Token, Type, TypeParamBound, Visibility,
};

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
                sig.ident.span(),
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

/// The parts of a method body written by `#[async_trait]`.
pub(crate) struct AsyncTraitBody {
    /// The `Box::pin` path, as async-trait wrote it.
    pub(crate) box_pin: Box<Expr>,
    /// The async block holding the user's body.
    pub(crate) future: Box<Expr>,
    /// `R` in the return type `Pin<Box<dyn Future<Output = R> + ...>>`: the user's return type.
    pub(crate) output: Type,
    /// The patterns of the parameters async-trait renamed `__argN`, as its block binds them.
    pub(crate) moved: Vec<MovedPattern>,
}

/// A parameter pattern that async-trait moved into its block: the parameter is `__argN` in the
/// signature, and the block starts with `let PATTERN = { let __argN = __argN; __argN };` (for a
/// `_` parameter, `let __argN = __argN;`, whose pattern is then `_`: it binds nothing).
pub(crate) struct MovedPattern {
    /// `__argN`, as async-trait spelled it in the signature (with its hygiene).
    pub(crate) arg: Ident,
    /// The pattern as the user wrote it.
    pub(crate) pat: Pat,
}

/// Recognizes a method already rewritten by `#[async_trait]` (which, on the impl block, expands
/// before this attribute): `fn ... -> Pin<Box<dyn Future<Output = R> + Send + 'async_trait>>`
/// whose last statement is `Box::pin(async move { ... })`.
pub(crate) fn async_trait_body(item: &LockFn) -> Option<AsyncTraitBody> {
    if item.sig.asyncness.is_some() || item.sig.constness.is_some() {
        return None;
    }
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
    let Expr::Async(block) = future else {
        return None;
    };
    let moved = block
        .block
        .stmts
        .iter()
        .filter_map(|stmt| match stmt {
            Stmt::Local(local) => moved_pattern(local),
            _ => None,
        })
        .collect();
    Some(AsyncTraitBody {
        box_pin: call.func.clone(),
        future: Box::new(future.clone()),
        output: boxed_future_output(ty)?.clone(),
        moved,
    })
}

/// `let PATTERN = { let __argN = __argN; __argN };`, or `let __argN = __argN;` (pattern `_`):
/// where async-trait's block binds a parameter it renamed.
pub(crate) fn moved_pattern(local: &Local) -> Option<MovedPattern> {
    let init = local.init.as_ref()?;
    if let (Pat::Ident(binding), Expr::Path(path)) = (&local.pat, &*init.expr) {
        if is_positional(&binding.ident) && path.path.is_ident(&binding.ident) {
            return Some(MovedPattern {
                arg: binding.ident.clone(),
                pat: Pat::Wild(syn::PatWild {
                    attrs: Vec::new(),
                    underscore_token: Token![_](binding.ident.span()),
                }),
            });
        }
    }
    let Expr::Block(block) = &*init.expr else {
        return None;
    };
    let [Stmt::Local(inner), Stmt::Expr(Expr::Path(value), None)] = &block.block.stmts[..] else {
        return None;
    };
    let MovedPattern { arg, .. } = moved_pattern(inner)?;
    value.path.is_ident(&arg).then(|| MovedPattern {
        arg,
        pat: local.pat.clone(),
    })
}

/// The names a pattern binds, once each (the alternatives of `A(x) | B(x)` bind the same ones).
/// Paths and types inside it (`Order { id: order_id, .. }`, `Enum::V(a)`) bind nothing.
pub(crate) fn pattern_names(pat: &Pat) -> Vec<Ident> {
    struct Names(Vec<Ident>);
    impl syn::visit::Visit<'_> for Names {
        fn visit_pat_ident(&mut self, binding: &syn::PatIdent) {
            if !self.0.contains(&binding.ident) {
                self.0.push(binding.ident.clone());
            }
            syn::visit::visit_pat_ident(self, binding);
        }
        fn visit_path(&mut self, _: &syn::Path) {}
        fn visit_type(&mut self, _: &Type) {}
    }
    let mut names = Names(Vec::new());
    syn::visit::Visit::visit_pat(&mut names, pat);
    names.0
}

/// `__argN`: the name async-trait gives a parameter written as a pattern.
pub(crate) fn is_positional(ident: &Ident) -> bool {
    ident
        .to_string()
        .strip_prefix("__arg")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// `R` in `Pin<Box<dyn Future<Output = R> + ...>>`.
fn boxed_future_output(ty: &Type) -> Option<&Type> {
    let pin = last_segment_args(ty, "Pin")?;
    let boxed = last_segment_args(pin, "Box")?;
    let Type::TraitObject(object) = boxed else {
        return None;
    };
    bounds_future_output(&object.bounds)
}

/// `R` in `Pin<Box<dyn Future<Output = R>>>` or `impl Future<Output = R>`.
pub(crate) fn future_output(ty: &Type) -> Option<&Type> {
    match ty {
        Type::ImplTrait(impl_trait) => bounds_future_output(&impl_trait.bounds),
        _ => boxed_future_output(ty),
    }
}

/// `R` in the `Future<Output = R>` bound of a list of bounds.
fn bounds_future_output(
    bounds: &syn::punctuated::Punctuated<TypeParamBound, Token![+]>,
) -> Option<&Type> {
    bounds.iter().find_map(|bound| {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loose_body_parse() {
        let item: LockFn = syn::parse_str("async fn f() -> Result<(), E> { let x = ; }").unwrap();
        assert!(matches!(item.body, Body::Raw(_)));
        let item: LockFn =
            syn::parse_str("async fn f() -> Result<(), E> { #![allow(unused)] Ok(()) }").unwrap();
        assert_eq!(item.inner_attrs.len(), 1);
        assert!(matches!(item.body, Body::Parsed(_)));
        let Err(error) = syn::parse_str::<LockFn>("async fn f() -> Result<(), E>;") else {
            panic!()
        };
        assert!(error.to_string().contains("needs a function body"));
        let Err(error) = syn::parse_str::<LockFn>("struct S;") else {
            panic!()
        };
        assert!(error
            .to_string()
            .contains("can only be applied to an `async fn`"));
    }

    #[test]
    fn future_outputs() {
        let ty: Type = syn::parse_str("impl Future<Output = Result<u8, E>> + Send").unwrap();
        assert!(future_output(&ty).is_some());
        let ty: Type = syn::parse_str("Pin<Box<dyn Future<Output = u8> + 'a>>").unwrap();
        assert!(future_output(&ty).is_some());
        let ty: Type = syn::parse_str("Pin<Box<dyn Stream<Item = u8>>>").unwrap();
        assert!(future_output(&ty).is_none());
    }
}
