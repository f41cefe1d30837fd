//! Code generation: the function as written, with its body run under the lock.
//!
//! Generated code names only `#krate::__private::...` (and `::core::option::Option`), uses
//! `Span::mixed_site()` for its own locals, and keeps the user's spans on parameter references.

use proc_macro2::{Delimiter, Group, Literal, Span, TokenStream, TokenTree};
use quote::{quote, quote_spanned, ToTokens};
use syn::spanned::Spanned;
use syn::visit_mut::VisitMut;
use syn::{Ident, Type};

use crate::item::{Body, LockFn};
use crate::model::{KeyPart, LockModel, Shape};

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
    let asserts = asserts(&model);
    let spec = spec(&model);

    let stmts = match &model.shape {
        Shape::AsyncFn => {
            let fake_return = fake_return(&model.ret);
            let run = run_call(
                &model,
                quote!(#spec, #key, async move { #fake_return #body }),
            );
            let await_ = quote_spanned!(model.ret.span()=> .await);
            quote! {
                #asserts
                let #key = #key_block;
                #run #await_
            }
        }
        // async-trait already put a typed early return in its block, and the outer function is
        // not async: build the key now (from the parameters, before they move into the block)
        // and box the locked future in place of the original one.
        Shape::AsyncTrait { box_pin, future } => {
            let Body::Parsed(block) = &body else {
                unreachable!("the async-trait shape is only detected in parsed bodies");
            };
            let before = &block.stmts[..block.stmts.len() - 1];
            let run = run_call(&model, quote!(#spec, #key, #future));
            quote! {
                #(#before)*
                #asserts
                let #key = #key_block;
                #box_pin(#run)
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

/// `{ let mut k = KeyBuilder::with_capacity(N); k.literal("order:"); k.value(&id, None); k.finish() }`
fn key_block(model: &LockModel) -> TokenStream {
    let krate = &model.krate;
    let builder = Ident::new("__distlock_builder", Span::mixed_site());
    let mut capacity = 0;
    let mut pushes = TokenStream::new();
    for part in &model.key.parts {
        match part {
            KeyPart::Literal(text) => {
                capacity += text.len();
                let text = Literal::string(text);
                pushes.extend(quote!(#builder.literal(#text);));
            }
            KeyPart::Value { expr, terminator } => {
                capacity += VALUE_CAPACITY;
                let terminator = match terminator {
                    Some(c) => {
                        let c = Literal::character(*c);
                        quote!(::core::option::Option::Some(#c))
                    }
                    None => quote!(::core::option::Option::None),
                };
                // `&(...)` spanned at the key literal: a value without `Display` is then
                // reported at the key (not from the key to the parameter's declaration), while
                // `#expr` keeps the parameter's own span.
                let mut value = Group::new(Delimiter::Parenthesis, expr.clone());
                value.set_span(model.key.span);
                pushes.extend(quote_spanned! {model.key.span=>
                    #builder.value(&#value, #terminator);
                });
            }
        }
    }
    quote! {
        {
            let mut #builder = #krate::__private::KeyBuilder::with_capacity(#capacity);
            #pushes
            #builder.finish()
        }
    }
}

/// Type-level checks of the return type, so that a missing `From<distlock::Error>` (or, with
/// `skip`, a missing `Default`) is reported at the return type with the runtime's messages.
///
/// The asserts and the `run` call are all located at the return type's first token. rustc then
/// sees the runtime's own `E: From<Error>` / `T: Default` errors from `run` as duplicates of
/// the asserts' errors at the same place and drops them: one mistake, one error.
fn asserts(model: &LockModel) -> TokenStream {
    // `impl Trait` cannot be named in a turbofish; the runtime's own bounds still apply.
    if contains_impl_trait(&model.ret) {
        return TokenStream::new();
    }
    let span = model.ret.span();
    let krate = respan(model.krate.to_token_stream(), span);
    // Only the location changes: each token keeps its own hygiene.
    let ret = locate(model.ret.to_token_stream(), span);
    let mut asserts = quote_spanned! {span=>
        let _ = #krate::__private::assert_lock_result::<#ret>;
    };
    if model.skip {
        asserts.extend(quote_spanned! {span=>
            let _ = #krate::__private::assert_skip_result::<#ret>;
        });
    }
    asserts
}

/// `run(args)` or `run_or_skip(args)`, located at the return type like the asserts.
fn run_call(model: &LockModel, args: TokenStream) -> TokenStream {
    let span = model.ret.span();
    let krate = respan(model.krate.to_token_stream(), span);
    let runner = if model.skip {
        quote_spanned!(span=> run_or_skip)
    } else {
        quote_spanned!(span=> run)
    };
    let mut parens = Group::new(Delimiter::Parenthesis, args);
    parens.set_span(span);
    quote_spanned!(span=> #krate::__private::#runner #parens)
}

/// The `LockSpec` literal.
fn spec(model: &LockModel) -> TokenStream {
    let krate = &model.krate;
    let client = match &model.client {
        Some(name) => quote!(::core::option::Option::Some(#name)),
        None => quote!(::core::option::Option::None),
    };
    let millis = |value: Option<u64>| match value {
        Some(millis) => {
            let millis = Literal::u64_suffixed(millis);
            quote!(::core::option::Option::Some(#krate::__private::StdDuration::from_millis(#millis)))
        }
        None => quote!(::core::option::Option::None),
    };
    let ttl = millis(model.ttl_millis);
    let renew = model.renew;
    let wait = millis(model.wait_millis);
    let min_hold = millis(model.min_hold_millis);
    quote! {
        #krate::__private::LockSpec {
            client: #client,
            ttl: #ttl,
            renew: #renew,
            wait: #wait,
            min_hold: #min_hold,
        }
    }
}

/// An unreachable typed `return` at the top of the body's async block, so the block's output
/// type is the declared return type even when the body only uses `?` or early `return`s.
fn fake_return(ret: &Type) -> TokenStream {
    let span = ret.span();
    let ret = erase_impl_trait(ret);
    let value = Ident::new("__distlock_fake_return", Span::mixed_site());
    quote_spanned! {span=>
        #[allow(
            unreachable_code,
            clippy::diverging_sub_expression,
            clippy::empty_loop,
            clippy::needless_return,
            clippy::unreachable
        )]
        if false {
            let #value: #ret = loop {};
            return #value;
        }
    }
}

/// Gives every token `span`.
fn respan(tokens: TokenStream, span: Span) -> TokenStream {
    map_spans(tokens, &|_| span)
}

/// Moves every token to `location`, keeping its own hygiene.
fn locate(tokens: TokenStream, location: Span) -> TokenStream {
    map_spans(tokens, &|span| span.located_at(location))
}

fn map_spans(tokens: TokenStream, f: &dyn Fn(Span) -> Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|mut token| {
            if let TokenTree::Group(group) = &token {
                let mut inner = Group::new(group.delimiter(), map_spans(group.stream(), f));
                inner.set_span(f(group.span()));
                token = TokenTree::Group(inner);
            } else {
                token.set_span(f(token.span()));
            }
            token
        })
        .collect()
}

fn contains_impl_trait(ty: &Type) -> bool {
    struct Finder(bool);
    impl<'ast> syn::visit::Visit<'ast> for Finder {
        fn visit_type_impl_trait(&mut self, _: &'ast syn::TypeImplTrait) {
            self.0 = true;
        }
    }
    let mut finder = Finder(false);
    syn::visit::Visit::visit_type(&mut finder, ty);
    finder.0
}

/// `impl Trait` is not allowed in a `let` type; `_` infers the same type.
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
mod tests {
    use super::*;
    use crate::item::LockFn;
    use crate::model::build;

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
                let _ = ::distlock::__private::assert_lock_result::<Result<u8, E> >;
                let __distlock_key = {
                    let mut __distlock_builder = ::distlock::__private::KeyBuilder::with_capacity(22usize);
                    __distlock_builder.literal("order:");
                    __distlock_builder.value(&(id), ::core::option::Option::None);
                    __distlock_builder.finish()
                };
                ::distlock::__private::run(
                    ::distlock::__private::LockSpec {
                        client: ::core::option::Option::None,
                        ttl: ::core::option::Option::Some(::distlock::__private::StdDuration::from_millis(10000u64)),
                        renew: true,
                        wait: ::core::option::Option::None,
                        min_hold: ::core::option::Option::None,
                    },
                    __distlock_key,
                    async move {
                        #[allow(
                            unreachable_code,
                            clippy::diverging_sub_expression,
                            clippy::empty_loop,
                            clippy::needless_return,
                            clippy::unreachable
                        )]
                        if false {
                            let __distlock_fake_return: Result<u8, E> = loop {};
                            return __distlock_fake_return;
                        }
                        { Ok(1) }
                    }
                ).await
            }
        };
        assert_eq!(out, expected.to_string());
    }

    #[test]
    fn skip_wait_client_and_crate() {
        let out = expand_str(
            r#"key = "a<<b:<x>", skip, client = "payments", crate = "my::lock""#,
            "async fn f(x: u8) -> Result<(), E> { Ok(()) }",
        );
        assert!(out.contains("my :: lock :: __private :: run_or_skip"));
        assert!(out.contains("assert_skip_result :: < Result < () , E > >"));
        assert!(out.contains(r#"literal ("a<b:")"#));
        assert!(out.contains(r#"client : :: core :: option :: Option :: Some ("payments")"#));
        let out = expand_str(
            r#"key = "k:<x>-", wait = "2s""#,
            "async fn f(x: u8) -> Result<(), E> { Ok(()) }",
        );
        assert!(out.contains("value (& (x) , :: core :: option :: Option :: Some ('-'))"));
        assert!(out.contains(
            "wait : :: core :: option :: Option :: Some (:: distlock :: __private :: StdDuration :: from_millis (2000u64))"
        ));
    }

    #[test]
    fn impl_trait_return_is_erased_and_not_asserted() {
        let out = expand_str(
            r#"key = "k""#,
            "async fn f() -> Result<impl Display, E> { Ok(1) }",
        );
        assert!(!out.contains("assert_lock_result"));
        assert!(out.contains("let __distlock_fake_return : Result < _ , E > = loop { } ;"));
    }

    #[test]
    fn async_trait_future_is_wrapped() {
        let out = expand_str(
            r#"key = "<id>""#,
            "fn f<'a>(id: u64) -> Pin<Box<dyn Future<Output = Result<(), E>> + Send + 'a>> { Box::pin(async move { Ok(()) }) }",
        );
        assert!(out.ends_with(
            ":: distlock :: __private :: run (:: distlock :: __private :: LockSpec { client : :: core :: option :: Option :: None , ttl : :: core :: option :: Option :: None , renew : false , wait : :: core :: option :: Option :: None , min_hold : :: core :: option :: Option :: None , } , __distlock_key , async move { Ok (()) })) }"
        ), "{out}");
        assert!(out.contains("Box :: pin (:: distlock"));
        assert!(out.contains("with_capacity (16usize)"));
    }
}
