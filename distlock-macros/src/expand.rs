//! Code generation: the function as written, with its body run under the lock.
//!
//! Generated code names only `#krate::__private::...` (and `::core`), and never warns in the
//! user's crate. Its own tokens carry the macro's expansion context (`Span::call_site()`, and
//! `Span::mixed_site()` for its locals), which rustc and clippy do not lint as the user's code;
//! where a token must point at the user's code for an error (the error type, the key), it is
//! only *located* there (`Span::located_at`) and keeps that context. The user's own tokens
//! (body, parameters, types) keep their own spans.

use proc_macro2::{Delimiter, Group, Literal, Span, TokenStream, TokenTree};
use quote::{quote, quote_spanned, ToTokens};
use syn::spanned::Spanned;
use syn::visit_mut::VisitMut;
use syn::{Block, Expr, FnArg, Ident, Pat, Stmt, Token, Type};

use crate::attr::{DurationArg, PermitsArg, Replicas};
use crate::item::{async_trait_body, moved_pattern, pattern_names, Body, LockFn, MovedPattern};
use crate::model::{Key, KeyPart, LockModel, ResultType, Shape};

/// Capacity reserved per placeholder value when building the key.
const VALUE_CAPACITY: usize = 16;

/// The whole function: signature, attributes and visibility unchanged, body under the lock.
pub(crate) fn expand(item: LockFn, model: LockModel) -> TokenStream {
    let LockFn {
        outer_attrs,
        inner_attrs,
        vis,
        sig,
        body,
    } = item;
    let key = Ident::new("__distlock_key", Span::mixed_site());
    let key_block = key_block(&model);
    let builder = builder(&model, &key);

    let stmts = match model.shape {
        Shape::AsyncFn => {
            let body = typed_body(&model.ret, body);
            let locked = locked(&model, &builder, quote!(async move { #body }));
            quote! {
                let #key = #key_block;
                #locked
            }
        }
        // async-trait already put a typed early return in its block, and the outer function is
        // not async: build the key now (from the parameters, before they move into the block;
        // the names of a parameter pattern from a borrow of the parameter, destructured as the
        // block will destructure it) and box the locked future in place of the original one.
        Shape::AsyncTrait {
            ref box_pin,
            ref future,
            ref moved,
        } => {
            let Body::Parsed(block) = &body else {
                unreachable!("the async-trait shape is only detected in parsed bodies");
            };
            let before = &block.stmts[..block.stmts.len() - 1];
            let params: Vec<Ident> = model.keys.iter().flat_map(|k| k.params.clone()).collect();
            let mut future = (**future).clone();
            if let Expr::Async(future) = &mut future {
                allow_unused_moves(&mut future.block, &params);
                mark_key_reads(&mut future.block, &params);
            }
            let borrows: Vec<TokenStream> = moved
                .iter()
                .filter_map(|MovedPattern { arg, pat }| {
                    let pat = borrowing_pattern(pat, &params)?;
                    Some(quote!(let #pat = &#arg;))
                })
                .collect();
            let key_block = match borrows.is_empty() {
                true => key_block,
                false => quote!({ #(#borrows)* #key_block }),
            };
            let locked = locked(&model, &builder, future.into_token_stream());
            quote! {
                #(#before)*
                let #key = #key_block;
                #box_pin(async move { #locked })
            }
        }
    };

    quote! {
        #(#outer_attrs)*
        #vis #sig {
            #(#inner_attrs)*
            #stmts
        }
    }
}

/// The function as written, for when the attribute has an error (emitted next to the
/// `compile_error!` so IDEs keep working). Its parameters are marked as possibly unused: with
/// the attribute broken, a parameter that only the key reads would otherwise warn on top of the
/// real error.
pub(crate) fn fallback(item: LockFn) -> TokenStream {
    let async_trait = async_trait_body(&item).is_some();
    let LockFn {
        outer_attrs,
        inner_attrs,
        vis,
        mut sig,
        mut body,
    } = item;
    let mut names = Vec::new();
    for input in &mut sig.inputs {
        if let FnArg::Typed(typed) = input {
            typed
                .attrs
                .push(syn::parse_quote!(#[allow(unused_variables)]));
            if let Pat::Ident(binding) = &*typed.pat {
                names.push(binding.ident.clone());
            }
        }
    }
    if let (true, Body::Parsed(block)) = (async_trait, &mut body) {
        if let Some(Stmt::Expr(Expr::Call(call), None)) = block.stmts.last_mut() {
            if let Some(Expr::Async(future)) = call.args.first_mut() {
                allow_unused_moves(&mut future.block, &names);
                // The parameter patterns async-trait moved into its block.
                for stmt in &mut future.block.stmts {
                    if let Stmt::Local(local) = stmt {
                        if moved_pattern(local).is_some() {
                            local
                                .attrs
                                .push(syn::parse_quote!(#[allow(unused_variables)]));
                        }
                    }
                }
            }
        }
    }
    // The body's own braces, with the inner attributes back inside them.
    let (stmts, braces) = match body {
        Body::Parsed(block) => {
            let stmts = &block.stmts;
            (quote!(#(#stmts)*), block.brace_token.span.join())
        }
        Body::Raw(group) => (group.stream(), group.span()),
    };
    let mut body = Group::new(Delimiter::Brace, quote!(#(#inner_attrs)* #stmts));
    body.set_span(braces);
    quote! {
        #(#outer_attrs)*
        #vis #sig #body
    }
}

/// async-trait moves each by-value parameter into its block (`let id = id;`), so a parameter
/// that only the key reads is unused *there*, and nothing outside the block can use that
/// binding: the one place where an `allow` cannot be avoided by generating different code.
fn allow_unused_moves(block: &mut Block, params: &[Ident]) {
    for stmt in &mut block.stmts {
        let Stmt::Local(local) = stmt else { continue };
        let (Pat::Ident(binding), Some(init)) = (&local.pat, &local.init) else {
            continue;
        };
        let moves_param =
            matches!(&*init.expr, Expr::Path(path) if path.path.is_ident(&binding.ident));
        if moves_param && params.contains(&binding.ident) {
            local
                .attrs
                .push(syn::parse_quote!(#[allow(unused_variables)]));
        }
    }
}

/// The names a parameter pattern binds in async-trait's block (`let Path(id) = { .. };`) that
/// only the key may read: each is marked read right after that statement (`let _ = &id;`), so
/// it is not an unused variable there while the pattern's other names still are when unused.
fn mark_key_reads(block: &mut Block, params: &[Ident]) {
    let stmts = std::mem::take(&mut block.stmts);
    for stmt in stmts {
        let names = match &stmt {
            Stmt::Local(local) if moved_pattern(local).is_some() => pattern_names(&local.pat)
                .into_iter()
                .filter(|name| params.contains(name))
                .collect(),
            _ => Vec::new(),
        };
        block.stmts.push(stmt);
        for name in names {
            let underscore = Token![_](Span::mixed_site());
            block
                .stmts
                .push(syn::parse_quote!(let #underscore = &#name;));
        }
    }
}

/// A parameter pattern that async-trait moved into its block, rewritten to be matched against a
/// borrow of the parameter (`let Path(id) = &__arg1;`) so that the key reads its names before
/// the parameter moves: `ref` and `mut` dropped and `&p` written `p` (default binding modes
/// then bind every name by reference, in every edition), and each name the key does not read
/// replaced by `_` (or by its subpattern, for `name @ p`), so none is unused. `None` when the
/// key reads none of its names.
fn borrowing_pattern(pat: &Pat, params: &[Ident]) -> Option<Pat> {
    struct Borrowing<'a> {
        params: &'a [Ident],
        reads: bool,
    }
    impl VisitMut for Borrowing<'_> {
        fn visit_pat_mut(&mut self, pat: &mut Pat) {
            let replacement = match pat {
                Pat::Reference(reference) => Some((*reference.pat).clone()),
                Pat::Ident(binding) if self.params.contains(&binding.ident) => {
                    self.reads = true;
                    binding.by_ref = None;
                    binding.mutability = None;
                    None
                }
                Pat::Ident(binding) => Some(match binding.subpat.take() {
                    Some((_, subpat)) => *subpat,
                    None => Pat::Wild(syn::PatWild {
                        attrs: Vec::new(),
                        underscore_token: Token![_](Span::mixed_site()),
                    }),
                }),
                _ => None,
            };
            match replacement {
                Some(replacement) => {
                    *pat = replacement;
                    self.visit_pat_mut(pat);
                }
                None => syn::visit_mut::visit_pat_mut(self, pat),
            }
        }
        // `Order { id, .. }` with `id` replaced: `Order { id: _, .. }`.
        fn visit_field_pat_mut(&mut self, field: &mut syn::FieldPat) {
            self.visit_pat_mut(&mut field.pat);
            let shorthand = matches!((&field.member, &*field.pat),
                (syn::Member::Named(member), Pat::Ident(binding)) if *member == binding.ident);
            if !shorthand && field.colon_token.is_none() {
                field.colon_token = Some(Token![:](Span::mixed_site()));
            }
        }
        // Paths and types inside patterns (`Order { id, .. }`) bind nothing.
        fn visit_path_mut(&mut self, _: &mut syn::Path) {}
        fn visit_type_mut(&mut self, _: &mut Type) {}
    }
    let mut borrowing = Borrowing {
        params,
        reads: false,
    };
    let mut pat = pat.clone();
    borrowing.visit_pat_mut(&mut pat);
    borrowing.reads.then_some(pat)
}

/// The body's statements, after an unreachable typed `return` that makes the async block's
/// output the declared return type even when the body only uses `?` or early `return`s.
///
/// The statements go straight into the async block (as an `async fn` body does), not inside a
/// block of their own: `{ { Ok(id) } }` would be an "unnecessary braces" warning in the user's
/// crate. Leading items stay first, so they never come after a statement.
fn typed_body(ret: &ResultType, body: Body) -> TokenStream {
    let value = Ident::new("__distlock_never", Span::mixed_site());
    let ty = erase_impl_trait(&ret.ty);
    // `if let` on a `None` rather than `loop {}`: no unreachable or diverging code to allow.
    let typed_return = quote! {
        if let ::core::option::Option::Some(#value) = ::core::option::Option::None::<#ty> {
            return #value;
        }
    };
    match body {
        Body::Parsed(block) => {
            let items = block
                .stmts
                .iter()
                .take_while(|stmt| matches!(stmt, Stmt::Item(_)))
                .count();
            let (items, rest) = block.stmts.split_at(items);
            quote!(#(#items)* #typed_return #(#rest)*)
        }
        Body::Raw(group) => {
            let stmts = group.stream();
            quote!(#typed_return #stmts)
        }
    }
}

/// `match lock(key)...run(body).await { .. }`: the body's own result, or the lock failure
/// converted into the function's error type (with `skip`, a busy lock gives `Ok(default)`).
fn locked(model: &LockModel, builder: &TokenStream, body: TokenStream) -> TokenStream {
    let result = Ident::new("__distlock_result", Span::mixed_site());
    let error = Ident::new("__distlock_error", Span::mixed_site());
    // Each requirement on the user's types is one call, spanned at the type it is about, so one
    // mistake is one error, at the right token.
    // A type parameter gets rustc's suggestion of the bound to add (`E: From<distlock::Error>`).
    let convert = if model.ret.err_is_param {
        "lock_error_param"
    } else {
        "lock_error"
    };
    let lock_error = private_call(model, convert, quote!(#error), model.ret.err_span);
    let skip = model.skip.then(|| {
        let skip_default = private_call(model, "skip_default", quote!(), model.ret.ok_span);
        quote! {
            ::core::result::Result::Err(#error) if #error.is_busy() => {
                ::core::result::Result::Ok(#skip_default)
            }
        }
    });
    quote! {
        match #builder.run(#body).await {
            ::core::result::Result::Ok(#result) => #result,
            #skip
            ::core::result::Result::Err(#error) => ::core::result::Result::Err(#lock_error),
        }
    }
}

/// `#krate::__private::#name(#args)`, with the path and the parentheses at `span`, a type the
/// user wrote, where rustc reports an unmet bound of the call. (Located there in the macro's
/// context instead, the error would be drawn from the attribute to the type.)
fn private_call(model: &LockModel, name: &str, args: TokenStream, span: Span) -> TokenStream {
    let krate = respan(model.krate.to_token_stream(), span);
    let name = Ident::new(name, span);
    let mut args = Group::new(Delimiter::Parenthesis, args);
    args.set_span(span);
    quote_spanned!(span=> #krate::__private::#name #args)
}

/// `__private::lock(key).label("order:<id>").ttl(..).renew(true)...`: the public `LockBuilder`
/// with the options; the metrics label is the key template as written (bounded, unlike the
/// key). With `skip`, `lock_skipping(key)`: a busy lock counts as skipped.
///
/// With `permits`, `__private::semaphore(key, n)` (`semaphore_skipping` with `skip`); a
/// constant `n` is checked (at least 1) where it is evaluated, at compile time. With `read`,
/// the builder's `.read()`: a shared hold.
fn builder(model: &LockModel, key: &Ident) -> TokenStream {
    let krate = &model.krate;
    let label = Literal::string(&model.label);
    let start = match &model.permits {
        // `key = [...]`: the locks taken together (`lock_all`).
        None if model.key_list => {
            let lock = if model.skip {
                "lock_all_skipping"
            } else {
                "lock_all"
            };
            let lock = Ident::new(lock, Span::call_site());
            quote!(#krate::__private::#lock(#key))
        }
        None => {
            let lock = if model.skip { "lock_skipping" } else { "lock" };
            let lock = Ident::new(lock, Span::call_site());
            quote!(#krate::__private::#lock(#key))
        }
        Some(permits) => {
            let permits = match permits {
                PermitsArg::Count(n) => Literal::u32_suffixed(*n).into_token_stream(),
                PermitsArg::Const(path) => {
                    let span = path.span();
                    let krate = respan(krate.to_token_stream(), span);
                    let value =
                        Ident::new("__distlock_permits", Span::mixed_site().located_at(span));
                    quote_spanned! {span=>
                        const {
                            let #value: u32 = #path;
                            #krate::__private::permits_const(#value)
                        }
                    }
                }
            };
            let semaphore = if model.skip {
                "semaphore_skipping"
            } else {
                "semaphore"
            };
            let semaphore = Ident::new(semaphore, Span::call_site());
            quote!(#krate::__private::#semaphore(#key, #permits))
        }
    };
    let mut builder = quote!(#start.label(#label));
    if model.read {
        builder.extend(quote!(.read()));
    }
    let duration = |arg: &DurationArg, check: &str| match arg {
        DurationArg::Millis(millis) => {
            let millis = Literal::u64_suffixed(*millis);
            quote!(#krate::__private::StdDuration::from_millis(#millis))
        }
        // Evaluated at compile time, so a constant out of the runtime's limits is a build
        // error, as a literal is. Spanned at the path, where rustc reports a constant of
        // another type ("expected `Duration`, found `u64`") or out of the limits.
        DurationArg::Const(path) => {
            let span = path.span();
            let krate = respan(krate.to_token_stream(), span);
            let check = Ident::new(check, span);
            let value = Ident::new("__distlock_duration", Span::mixed_site().located_at(span));
            quote_spanned! {span=>
                const {
                    let #value: #krate::__private::StdDuration = #path;
                    #krate::__private::#check(#value)
                }
            }
        }
    };
    if let Some(ttl) = &model.ttl {
        let ttl = duration(ttl, "ttl_const");
        builder.extend(quote!(.ttl(#ttl)));
    }
    if model.renew {
        builder.extend(quote!(.renew(true)));
    }
    if let Some(wait) = &model.wait {
        let wait = duration(wait, "wait_const");
        builder.extend(quote!(.wait(#wait)));
    }
    if let Some(min_hold) = &model.min_hold {
        let min_hold = duration(min_hold, "min_hold_const");
        builder.extend(quote!(.min_hold(#min_hold)));
    }
    if model.fenced {
        builder.extend(quote!(.fenced(true)));
    }
    match &model.min_replicas {
        Some(Replicas::Count(replicas)) => {
            // A plain `usize` literal, whatever the user's literal looked like (`0x1`, `1_0`).
            let replicas = replicas.base10_parse::<usize>().unwrap_or_default();
            let replicas = Literal::usize_suffixed(replicas);
            builder.extend(quote!(.min_replicas(#replicas)));
        }
        Some(Replicas::All) => {
            builder.extend(quote!(.min_replicas(#krate::__private::ALL_REPLICAS)));
        }
        None => {}
    }
    if let Some(client) = &model.client {
        builder.extend(quote!(.client(#client)));
    }
    builder
}

/// The key: one [`one_key`] call, or with `key = [...]` an array of them (`[key(..), key(..)]`).
fn key_block(model: &LockModel) -> TokenStream {
    match model.key_list {
        false => one_key(model, &model.keys[0]),
        true => {
            let keys = model.keys.iter().map(|key| one_key(model, key));
            quote!([#(#keys),*])
        }
    }
}

/// `key(N, "order:", &[part(&(id), ":"), …])`: the leading literal text, then each value with
/// the literal text that follows it (whose first character is the value's terminator); one call.
fn one_key(model: &LockModel, key: &Key) -> TokenStream {
    let krate = &model.krate;
    let at_key = key.span;
    let parts = &key.parts;
    let mut capacity = 0;
    let mut lead = "";
    let mut values = Vec::new();
    for (index, part) in parts.iter().enumerate() {
        match part {
            KeyPart::Literal(text) => {
                capacity += text.len();
                if index == 0 {
                    lead = text;
                }
            }
            KeyPart::Value { expr, terminator } => {
                capacity += VALUE_CAPACITY;
                let then = match parts.get(index + 1) {
                    Some(KeyPart::Literal(text)) => text.as_str(),
                    _ => "",
                };
                debug_assert_eq!(*terminator, then.chars().next());
                let then = Literal::string(then);
                // `part(&(...))` spanned at the key literal: a value without `Display` is then
                // reported at the key (not from the key to the parameter's declaration), while
                // `#expr` keeps the parameter's own span.
                let krate = respan(krate.to_token_stream(), at_key);
                let mut value = Group::new(Delimiter::Parenthesis, expr.clone());
                value.set_span(at_key);
                values.push(quote_spanned! {at_key=>
                    #krate::__private::part(&#value, #then)
                });
            }
        }
    }
    let lead = Literal::string(lead);
    quote!(#krate::__private::key(#capacity, #lead, &[#(#values),*]))
}

/// Gives every token `span`.
fn respan(tokens: TokenStream, span: Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|mut token| {
            if let TokenTree::Group(group) = &token {
                let mut inner = Group::new(group.delimiter(), respan(group.stream(), span));
                inner.set_span(span);
                token = TokenTree::Group(inner);
            } else {
                token.set_span(span);
            }
            token
        })
        .collect()
}

/// `impl Trait` is not allowed in a turbofish; `_` infers the same type.
fn erase_impl_trait(ty: &Type) -> Type {
    struct Eraser;
    impl VisitMut for Eraser {
        fn visit_type_mut(&mut self, ty: &mut Type) {
            if let Type::ImplTrait(impl_trait) = ty {
                *ty = Type::Infer(syn::TypeInfer {
                    underscore_token: syn::Token![_](impl_trait.span()),
                });
            } else {
                syn::visit_mut::visit_type_mut(self, ty);
            }
        }
    }
    let mut ty = ty.clone();
    Eraser.visit_type_mut(&mut ty);
    ty
}

#[cfg(test)]
mod tests;
