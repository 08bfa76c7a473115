//! Attribute macros of the guest SDK. Use them through `faas_sdk`, not directly.

use proc_macro::TokenStream;
use quote::quote;
use syn::{ItemFn, parse_macro_input};

/// Exports `fn(Context, Vec<Region>) -> Result<Vec<Region>, String>` as the
/// component's `faas:platform/handler`.
#[proc_macro_attribute]
pub fn step(attr: TokenStream, item: TokenStream) -> TokenStream {
    if !attr.is_empty() {
        return no_arguments("#[faas_sdk::step]");
    }
    let handler = parse_macro_input!(item as ItemFn);
    let name = &handler.sig.ident;
    quote! {
        #handler

        #[doc(hidden)]
        struct __FaasStepHandler;

        impl ::faas_sdk::__private::StepHandler for __FaasStepHandler {
            fn handle(
                ctx: ::faas_sdk::step::Context,
                inputs: ::std::vec::Vec<::faas_sdk::step::Region>,
            ) -> ::core::result::Result<
                ::std::vec::Vec<::faas_sdk::step::Region>,
                ::std::string::String,
            > {
                #name(ctx, inputs)
            }
        }

        ::faas_sdk::__private::export_step!(__FaasStepHandler);
    }
    .into()
}

fn no_arguments(what: &str) -> TokenStream {
    syn::Error::new(
        proc_macro2::Span::call_site(),
        format!("{what} takes no arguments"),
    )
    .to_compile_error()
    .into()
}

/// Exports `fn(faas_sdk::http::Request) -> impl IntoResponse` as the component's
/// `wasi:http/incoming-handler`.
#[proc_macro_attribute]
pub fn http(attr: TokenStream, item: TokenStream) -> TokenStream {
    if !attr.is_empty() {
        return no_arguments("#[faas_sdk::http]");
    }
    let handler = parse_macro_input!(item as ItemFn);
    let name = &handler.sig.ident;
    quote! {
        #handler

        #[doc(hidden)]
        struct __FaasHttpHandler;

        impl ::faas_sdk::__private::IncomingHandler for __FaasHttpHandler {
            fn handle(
                request: ::faas_sdk::__private::IncomingRequest,
                out: ::faas_sdk::__private::ResponseOutparam,
            ) {
                ::faas_sdk::__private::serve(request, out, #name)
            }
        }

        ::faas_sdk::__private::wasip2::http::proxy::export!(__FaasHttpHandler);
    }
    .into()
}
