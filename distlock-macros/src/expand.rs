//! Code generation: the function as written, with its body run under the lock.
//!
//! Generated code names only `#krate::__private::...` (and `::core::option::Option`), uses
//! `Span::mixed_site()` for its own locals, and keeps the user's spans on parameter references.

use proc_macro2::{Literal, Span, TokenStream, TokenTree};
use quote::{quote, quote_spanned, ToTokens};
use syn::spanned::Spanned;
use syn::visit_mut::VisitMut;
use syn::{Ident, Type};

use crate::model::{Body, KeyPart, LockFn, LockModel, Shape};

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
    let run = runner(&model);
    let spec = spec(&model);

    let stmts = match &model.shape {
        Shape::AsyncFn => {
            let fake_return = fake_return(&model.ret);
            quote! {
                #asserts
                let #key = #key_block;
                #run(#spec, #key, async move { #fake_return #body }).await
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
            quote! {
                #(#before)*
                #asserts
                let #key = #key_block;
                #box_pin(#run(#spec, #key, #future))
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
                // Spanned at the key literal so a value without `Display` is reported there.
                pushes.extend(quote_spanned! {model.key.span=>
                    #builder.value(&#expr, #terminator);
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

/// Type-level checks of the return type, spanned at it so a missing `From<distlock::Error>`
/// (or, with `skip`, a missing `Default`) is reported there with the runtime's messages.
fn asserts(model: &LockModel) -> TokenStream {
    let ret = &model.ret;
    // `impl Trait` cannot be named in a turbofish; the runtime's own bounds still apply.
    if contains_impl_trait(ret) {
        return TokenStream::new();
    }
    let span = ret.span();
    let krate = respan(model.krate.to_token_stream(), span);
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

/// `run` or `run_or_skip`, spanned at the return type like the asserts: rustc then drops the
/// runtime's own `E: From<Error>` / `T: Default` errors as implied by the asserts' errors, so
/// one mistake gives one error.
fn runner(model: &LockModel) -> TokenStream {
    let span = model.ret.span();
    let krate = respan(model.krate.to_token_stream(), span);
    if model.skip {
        quote_spanned!(span=> #krate::__private::run_or_skip)
    } else {
        quote_spanned!(span=> #krate::__private::run)
    }
}

/// The `LockSpec` literal.
fn spec(model: &LockModel) -> TokenStream {
    let krate = &model.krate;
    let client = match &model.client {
        Some(name) => quote!(::core::option::Option::Some(#name)),
        None => quote!(::core::option::Option::None),
    };
    let ttl = Literal::u64_suffixed(model.ttl_millis);
    let renew = model.renew;
    let wait = match model.wait_millis {
        Some(millis) => {
            let millis = Literal::u64_suffixed(millis);
            quote!(::core::option::Option::Some(#krate::__private::StdDuration::from_millis(#millis)))
        }
        None => quote!(::core::option::Option::None),
    };
    quote! {
        #krate::__private::LockSpec {
            client: #client,
            ttl: #krate::__private::StdDuration::from_millis(#ttl),
            renew: #renew,
            wait: #wait,
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

fn respan(tokens: TokenStream, span: Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|mut token| {
            if let TokenTree::Group(group) = &token {
                let mut inner = proc_macro2::Group::new(
                    group.delimiter(),
                    respan(group.stream(), span),
                );
                inner.set_span(span);
                token = TokenTree::Group(inner);
            } else {
                token.set_span(span);
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
