//! `#[tool]`: a toolhost tool from a function. Its documentation, with examples, is on the
//! re-export,
//! [`toolhost_plugin_api::tool`](https://docs.rs/toolhost-plugin-api/latest/toolhost_plugin_api/attr.tool.html);
//! this crate is not meant to be used directly: depend on `toolhost-plugin-api`, whose
//! default `macros` feature brings it in.

#![warn(missing_docs)]

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::{format_ident, quote, quote_spanned};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{
    Attribute, Expr, ExprLit, FnArg, GenericArgument, Ident, ItemFn, Lit, LitStr, Pat,
    PathArguments, RangeLimits, ReturnType, Token, Type,
};

/// The longest tool name hosts take (`toolhost_plugin_api::check::MAX_TOOL_NAME_CHARS`).
const MAX_NAME_CHARS: usize = 64;

/// Makes a toolhost tool of a function; see
/// [`toolhost_plugin_api::tool`](https://docs.rs/toolhost-plugin-api/latest/toolhost_plugin_api/attr.tool.html)
/// for its options and examples.
#[proc_macro_attribute]
pub fn tool(attr: TokenStream, item: TokenStream) -> TokenStream {
    let function = syn::parse_macro_input!(item as ItemFn);
    match expand(attr.into(), function) {
        Ok(tokens) => tokens.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

/// What `#[tool(...)]` says.
#[derive(Default)]
struct ToolAttr {
    name: Option<LitStr>,
    description: Option<LitStr>,
    /// The `Risk` variant said, spanned where it was said.
    risk: Option<Ident>,
    interactive: bool,
    workspace: bool,
    env: Vec<LitStr>,
    programs: Vec<LitStr>,
    /// The `TaskSupport` variant said.
    task: Option<Ident>,
    krate: Option<syn::Path>,
}

const TOOL_KEYS: &str =
    "risk, name, description, interactive, workspace, env, programs, task and crate";
const RISKS: [(&str, &str); 5] = [
    ("read", "Read"),
    ("write", "Write"),
    ("network", "Network"),
    ("destructive", "Destructive"),
    ("deny", "Deny"),
];
const TASKS: [(&str, &str); 3] = [
    ("forbidden", "Forbidden"),
    ("optional", "Optional"),
    ("required", "Required"),
];

fn parse_tool_attr(attr: TokenStream2) -> syn::Result<ToolAttr> {
    let mut out = ToolAttr::default();
    let parser = syn::meta::parser(|meta| {
        let key = meta
            .path
            .get_ident()
            .map(Ident::to_string)
            .unwrap_or_default();
        match key.as_str() {
            "risk" => {
                out.risk = Some(variant(
                    &RISKS,
                    meta.value()?.parse()?,
                    "risk",
                    "`risk = read`, `write`, `network`, `destructive` or `deny`",
                )?);
            }
            "name" => out.name = Some(meta.value()?.parse()?),
            "description" => out.description = Some(meta.value()?.parse()?),
            "interactive" => out.interactive = flag(&meta)?,
            "workspace" => out.workspace = flag(&meta)?,
            "env" => out.env.extend(strings(&meta)?),
            "programs" => out.programs.extend(strings(&meta)?),
            "task" => {
                out.task = Some(variant(
                    &TASKS,
                    meta.value()?.parse()?,
                    "task support",
                    "`task = optional`, `required` or `forbidden`",
                )?);
            }
            "crate" => out.krate = Some(meta.value()?.parse()?),
            _ => {
                return Err(meta.error(format!(
                    "unknown `#[tool]` argument `{}`: it takes {TOOL_KEYS}",
                    path_text(&meta.path)
                )));
            }
        }
        Ok(())
    });
    syn::parse::Parser::parse2(parser, attr)?;
    Ok(out)
}

/// The variant (`Read`) of what was said (`read`, any case) in `table`, spanned where it
/// was said; anything else is refused, listing what may be said.
fn variant(table: &[(&str, &str)], said: Ident, what: &str, choices: &str) -> syn::Result<Ident> {
    let lower = said.to_string().to_ascii_lowercase();
    match table.iter().find(|(name, _)| *name == lower) {
        Some((_, v)) => Ok(format_ident!("{}", v, span = said.span())),
        None => Err(syn::Error::new(
            said.span(),
            format!("unknown {what} `{said}`: write {choices}"),
        )),
    }
}

/// `interactive` or `interactive = true`.
fn flag(meta: &syn::meta::ParseNestedMeta<'_>) -> syn::Result<bool> {
    if meta.input.peek(Token![=]) {
        let value: syn::LitBool = meta.value()?.parse()?;
        Ok(value.value)
    } else {
        Ok(true)
    }
}

/// `"A"` or `["A", "B"]`.
fn strings(meta: &syn::meta::ParseNestedMeta<'_>) -> syn::Result<Vec<LitStr>> {
    let value = meta.value()?;
    if value.peek(syn::token::Bracket) {
        let content;
        syn::bracketed!(content in value);
        let list = Punctuated::<LitStr, Token![,]>::parse_terminated(&content)?;
        Ok(list.into_iter().collect())
    } else {
        Ok(vec![value.parse()?])
    }
}

fn path_text(path: &syn::Path) -> String {
    quote!(#path).to_string().replace(' ', "")
}

/// The host's rule for tool names, at compile time.
fn check_name(name: &str) -> Result<(), String> {
    let rule = "a tool's name is 1-64 characters of A-Z, a-z, 0-9, _ and -";
    let chars = name.chars().count();
    if chars == 0 {
        return Err(format!("the tool's name is empty: {rule}"));
    }
    if chars > MAX_NAME_CHARS {
        return Err(format!(
            "the tool's name `{name}` is {chars} characters long: {rule}; shorten the \
             function's name or give one with `#[tool(name = \"...\")]`"
        ));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
    {
        return Err(format!(
            "{bad:?} is not allowed in the tool's name `{name}`: {rule}"
        ));
    }
    Ok(())
}

/// The text of the `///` comments among `attrs`, one line each, the one space after `///`
/// dropped.
fn doc_text(attrs: &[Attribute]) -> Option<String> {
    let mut lines = Vec::new();
    for attr in attrs.iter().filter(|a| a.path().is_ident("doc")) {
        if let syn::Meta::NameValue(nv) = &attr.meta
            && let Expr::Lit(ExprLit {
                lit: Lit::Str(s), ..
            }) = &nv.value
        {
            let line = s.value();
            lines.push(
                line.strip_prefix(' ')
                    .unwrap_or(&line)
                    .trim_end()
                    .to_owned(),
            );
        }
    }
    let text = unwrap_lines(&lines);
    (!text.is_empty()).then_some(text)
}

/// Source lines of a doc comment as the description the model reads: the lines of a
/// paragraph joined with spaces (a `///` comment wraps where the source does, not where the
/// text breaks), paragraphs apart by a blank line; list items, headings, table rows and
/// fenced code keep their own lines.
fn unwrap_lines(lines: &[String]) -> String {
    let mut out = String::new();
    let mut fenced = false;
    let mut blank = false;
    for line in lines {
        let t = line.trim_start();
        let fence = t.starts_with("```");
        if t.is_empty() && !fenced {
            blank = !out.is_empty();
            continue;
        }
        let own_line = fenced
            || fence
            || t.starts_with("- ")
            || t.starts_with("* ")
            || t.starts_with('#')
            || t.starts_with('|')
            || t.split_once(". ")
                .is_some_and(|(n, _)| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()));
        if !out.is_empty() {
            out.push_str(if blank {
                "\n\n"
            } else if own_line {
                "\n"
            } else {
                " "
            });
        }
        out.push_str(if fenced || fence { line } else { t });
        blank = false;
        if fence {
            fenced = !fenced;
        }
    }
    out.trim().to_owned()
}

/// What a parameter of the function is.
enum Param {
    /// `ctx: &ToolContext<'_>`: the call's context.
    Context,
    /// `#[settings] s: T`: the plugin's settings, read for the call.
    Settings(Type),
    /// `#[args] a: T`: the whole arguments object, a type of the author's.
    Args(Type),
    /// One property of the arguments object.
    Property(Box<Property>),
}

/// One property of the generated arguments struct.
struct Property {
    ident: Ident,
    ty: Type,
    docs: Vec<Attribute>,
    default: Option<Expr>,
    range: Option<(Option<Expr>, Option<Expr>)>,
    length: Option<(Option<Expr>, Option<Expr>)>,
    pattern: Option<LitStr>,
    description: Option<LitStr>,
}

const ARG_KEYS: &str = "default, range, length, pattern and description";

/// `A..=B`, `A..` or `..=B` as (min, max); `A..B` is refused, naming the fix.
fn bounds(expr: Expr, what: &str) -> syn::Result<(Option<Expr>, Option<Expr>)> {
    match expr {
        Expr::Range(range) => {
            if matches!(range.limits, RangeLimits::HalfOpen(_)) && range.end.is_some() {
                return Err(syn::Error::new(
                    range.span(),
                    format!(
                        "`{what}` takes an inclusive range: write `A..=B` (the schema's \
                         maximum is inclusive), `A..` or `..=B`"
                    ),
                ));
            }
            Ok((range.start.map(|e| *e), range.end.map(|e| *e)))
        }
        other => Err(syn::Error::new(
            other.span(),
            format!("`{what}` takes a range: `A..=B`, `A..` or `..=B`"),
        )),
    }
}

fn parse_param(arg: &mut FnArg) -> syn::Result<(Param, Ident)> {
    let typed = match arg {
        FnArg::Receiver(r) => {
            return Err(syn::Error::new(
                r.span(),
                "a #[tool] function takes no `self`: write a free function (state belongs in \
                 the plugin's settings, its state folder or a static)",
            ));
        }
        FnArg::Typed(t) => t,
    };
    let ident = match &*typed.pat {
        Pat::Ident(p) if p.by_ref.is_none() && p.subpat.is_none() => p.ident.clone(),
        other => {
            return Err(syn::Error::new(
                other.span(),
                "a #[tool] parameter is a plain name (`count: u32`), not a pattern",
            ));
        }
    };
    let mut is_settings = false;
    let mut is_args = false;
    let mut docs = Vec::new();
    let mut arg_attrs = Vec::new();
    let mut kept = Vec::new();
    for attr in typed.attrs.drain(..) {
        if attr.path().is_ident("doc") {
            docs.push(attr);
        } else if attr.path().is_ident("settings") {
            attr.meta.require_path_only()?;
            is_settings = true;
        } else if attr.path().is_ident("args") {
            attr.meta.require_path_only()?;
            is_args = true;
        } else if attr.path().is_ident("arg") {
            arg_attrs.push(attr);
        } else {
            kept.push(attr);
        }
    }
    typed.attrs = kept;
    let ty = (*typed.ty).clone();
    if is_context(&ty) {
        if let Some(a) = arg_attrs.first() {
            return Err(syn::Error::new(
                a.span(),
                "`#[arg]` is for the tool's arguments, not its context",
            ));
        }
        return Ok((Param::Context, ident));
    }
    if is_settings || is_args {
        if let Some(a) = arg_attrs.first() {
            return Err(syn::Error::new(
                a.span(),
                "`#[arg]` describes one argument; on a whole type, put serde and schemars \
                 attributes on its fields",
            ));
        }
        if is_settings && is_args {
            return Err(syn::Error::new(
                ident.span(),
                "a parameter is either `#[settings]` or `#[args]`, not both",
            ));
        }
        return Ok((
            if is_settings {
                Param::Settings(ty)
            } else {
                Param::Args(ty)
            },
            ident,
        ));
    }
    if let Type::Reference(r) = &ty {
        return Err(syn::Error::new(
            r.span(),
            "a tool's arguments are owned values: take `String` rather than `&str`, \
             `Vec<T>` rather than `&[T]` (only the context, `&ToolContext<'_>`, is borrowed)",
        ));
    }
    let mut property = Property {
        ident: ident.clone(),
        ty,
        docs,
        default: None,
        range: None,
        length: None,
        pattern: None,
        description: None,
    };
    for attr in arg_attrs {
        attr.parse_nested_meta(|meta| {
            let key = meta
                .path
                .get_ident()
                .map(Ident::to_string)
                .unwrap_or_default();
            match key.as_str() {
                "default" => property.default = Some(meta.value()?.parse()?),
                "range" => property.range = Some(bounds(meta.value()?.parse()?, "range")?),
                "length" => property.length = Some(bounds(meta.value()?.parse()?, "length")?),
                "pattern" => property.pattern = Some(meta.value()?.parse()?),
                "description" => property.description = Some(meta.value()?.parse()?),
                _ => {
                    return Err(meta.error(format!(
                        "unknown `#[arg]` key `{}`: it takes {ARG_KEYS}",
                        path_text(&meta.path)
                    )));
                }
            }
            Ok(())
        })?;
    }
    Ok((Param::Property(Box::new(property)), ident))
}

/// `&ToolContext<'_>` (by its last path segment).
fn is_context(ty: &Type) -> bool {
    match ty {
        Type::Reference(r) => last_ident(&r.elem).is_some_and(|i| i == "ToolContext"),
        _ => false,
    }
}

fn last_segment(ty: &Type) -> Option<&syn::PathSegment> {
    match ty {
        Type::Path(p) if p.qself.is_none() => p.path.segments.last(),
        Type::Group(g) => last_segment(&g.elem),
        Type::Paren(p) => last_segment(&p.elem),
        _ => None,
    }
}

fn last_ident(ty: &Type) -> Option<&Ident> {
    last_segment(ty).map(|s| &s.ident)
}

fn type_args(segment: &syn::PathSegment) -> Vec<&Type> {
    match &segment.arguments {
        PathArguments::AngleBracketed(a) => a
            .args
            .iter()
            .filter_map(|g| match g {
                GenericArgument::Type(t) => Some(t),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// What the function returns, and so what the tool's outcome is.
enum Kind {
    /// `String`: text.
    Text,
    /// `ToolOutput`: the whole outcome, as the function made it.
    Output,
    /// `Vec<Diagnostic>`: a list of findings.
    Diagnostics,
    /// Any other type: a structured value whose schema is the output schema.
    Structured(Type),
    /// `(String, T)`: the text the model reads, beside a structured value.
    TextAnd(Type),
    /// `Structured<T>`: a structured value with its text, details and error flag.
    Answer(Type),
}

fn kind_of(ty: &Type) -> Kind {
    if let Type::Tuple(t) = ty
        && t.elems.len() == 2
        && last_ident(&t.elems[0]).is_some_and(|i| i == "String")
    {
        return Kind::TextAnd(t.elems[1].clone());
    }
    match last_segment(ty) {
        Some(s) if s.ident == "String" && type_args(s).is_empty() => Kind::Text,
        Some(s) if s.ident == "ToolOutput" => Kind::Output,
        Some(s) if s.ident == "Structured" && type_args(s).len() == 1 => {
            Kind::Answer(type_args(s)[0].clone())
        }
        Some(s)
            if s.ident == "Vec"
                && type_args(s)
                    .first()
                    .and_then(|t| last_ident(t))
                    .is_some_and(|i| i == "Diagnostic") =>
        {
            Kind::Diagnostics
        }
        _ => Kind::Structured(ty.clone()),
    }
}

/// `(value type, is a Result)` of the function's return type.
fn returned(output: &ReturnType) -> syn::Result<(Type, bool)> {
    let ty = match output {
        ReturnType::Default => {
            return Err(syn::Error::new(
                Span::call_site(),
                "a #[tool] function returns what the tool answers: `Result<String, ToolError>` \
                 for text, `Result<T, E>` for a structured value (T a struct), `ToolOutput`, \
                 `Vec<Diagnostic>`, `(String, T)` or `Structured<T>`; E is any error that \
                 displays",
            ));
        }
        ReturnType::Type(_, ty) => (**ty).clone(),
    };
    if let Some(s) = last_segment(&ty)
        && s.ident == "Result"
        && let Some(ok) = type_args(s).first()
    {
        return Ok(((*ok).clone(), true));
    }
    Ok((ty, false))
}

fn expand(attr: TokenStream2, mut function: ItemFn) -> syn::Result<TokenStream2> {
    let args = parse_tool_attr(attr)?;
    let krate: syn::Path = args
        .krate
        .clone()
        .unwrap_or_else(|| syn::parse_quote!(::toolhost_plugin_api));
    let krate_text = path_text(&krate);
    let sig = &function.sig;
    if let Some(c) = &sig.constness {
        return Err(syn::Error::new(
            c.span(),
            "a #[tool] function cannot be `const`",
        ));
    }
    if let Some(u) = &sig.unsafety {
        return Err(syn::Error::new(
            u.span(),
            "a #[tool] function cannot be `unsafe`",
        ));
    }
    if let Some(abi) = &sig.abi {
        return Err(syn::Error::new(
            abi.span(),
            "a #[tool] function has no `extern` ABI",
        ));
    }
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        return Err(syn::Error::new(
            sig.generics.span(),
            "a #[tool] function takes no generic parameters: the host needs one argument \
             schema per tool",
        ));
    }
    if let Some(v) = &sig.variadic {
        return Err(syn::Error::new(
            v.span(),
            "a #[tool] function is not variadic",
        ));
    }
    let fn_ident = sig.ident.clone();
    let tool_name = match &args.name {
        Some(n) => {
            check_name(&n.value()).map_err(|e| syn::Error::new(n.span(), e))?;
            n.value()
        }
        None => {
            let name = fn_ident.to_string();
            let name = name.strip_prefix("r#").unwrap_or(&name).to_owned();
            check_name(&name).map_err(|e| syn::Error::new(fn_ident.span(), e))?;
            name
        }
    };
    let description = match (&args.description, doc_text(&function.attrs)) {
        (Some(d), _) => d.value(),
        (None, Some(d)) => d,
        (None, None) => {
            return Err(syn::Error::new(
                fn_ident.span(),
                format!(
                    "the tool `{tool_name}` has no description: write a `///` comment on the \
                     function (what it does, when to use it; the model reads it) or \
                     `#[tool(description = \"...\")]`"
                ),
            ));
        }
    };
    let Some(risk) = &args.risk else {
        return Err(syn::Error::new(
            Span::call_site(),
            format!(
                "say how risky a call to `{tool_name}` is: `#[tool(risk = read)]` (looks \
                 things up), `write`, `network` or `destructive`; the host's approval policy \
                 reads it"
            ),
        ));
    };

    let (value_ty, is_result) = returned(&function.sig.output)?;
    let kind = kind_of(&value_ty);

    let mut params = Vec::new();
    let mut errors: Option<syn::Error> = None;
    for arg in function.sig.inputs.iter_mut() {
        match parse_param(arg) {
            Ok(p) => params.push(p),
            Err(e) => match &mut errors {
                Some(all) => all.combine(e),
                None => errors = Some(e),
            },
        }
    }
    if let Some(e) = errors {
        return Err(e);
    }
    let whole_args: Vec<&Type> = params
        .iter()
        .filter_map(|(p, _)| match p {
            Param::Args(t) => Some(t),
            _ => None,
        })
        .collect();
    let has_properties = params.iter().any(|(p, _)| matches!(p, Param::Property(_)));
    if whole_args.len() > 1 || (whole_args.len() == 1 && has_properties) {
        return Err(syn::Error::new(
            fn_ident.span(),
            "an `#[args]` parameter is the whole arguments object: a #[tool] function has at \
             most one, and then no other argument parameters",
        ));
    }
    if params
        .iter()
        .filter(|(p, _)| matches!(p, Param::Settings(_)))
        .count()
        > 1
    {
        return Err(syn::Error::new(
            fn_ident.span(),
            "a #[tool] function has at most one `#[settings]` parameter",
        ));
    }
    if params
        .iter()
        .filter(|(p, _)| matches!(p, Param::Context))
        .count()
        > 1
    {
        return Err(syn::Error::new(
            fn_ident.span(),
            "a #[tool] function has at most one context parameter",
        ));
    }

    let vis = &function.vis;
    let args_ident = format_ident!("__toolhost_{}_args", fn_ident);
    let serde_crate = format!("{krate_text}::__private::serde");
    let schemars_crate = format!("{krate_text}::__private::schemars");
    let mut fields = Vec::new();
    let mut defaults = Vec::new();
    for (p, _) in &params {
        let Param::Property(prop) = p else { continue };
        let Property {
            ident,
            ty,
            docs,
            default,
            range,
            length,
            pattern,
            description,
        } = &**prop;
        let mut attrs = Vec::new();
        if let Some(d) = description {
            attrs.push(quote!(#[doc = #d]));
        } else {
            attrs.extend(docs.iter().map(|d| quote!(#d)));
        }
        if let Some(expr) = default {
            let fn_name = format_ident!("__toolhost_{}_default_{}", fn_ident, ident);
            let fn_text = fn_name.to_string();
            let value = match expr {
                Expr::Lit(ExprLit {
                    lit: Lit::Str(s), ..
                }) => quote_spanned!(s.span()=> ::core::convert::From::from(#s)),
                other => quote!(#other),
            };
            defaults.push(quote! {
                #[doc(hidden)]
                #[allow(non_snake_case)]
                fn #fn_name() -> #ty { #value }
            });
            attrs.push(quote!(#[serde(default = #fn_text)]));
        }
        if let Some((min, max)) = range {
            let parts = bound_parts(min, max);
            attrs.push(quote!(#[schemars(range(#parts))]));
        }
        if let Some((min, max)) = length {
            let parts = bound_parts(min, max);
            attrs.push(quote!(#[schemars(length(#parts))]));
        }
        if let Some(p) = pattern {
            attrs.push(quote!(#[schemars(regex(pattern = #p))]));
        }
        fields.push(quote! { #(#attrs)* #ident: #ty, });
    }
    let args_type: TokenStream2 = match whole_args.first() {
        Some(t) => quote!(#t),
        None => quote!(#args_ident),
    };
    let args_struct = if whole_args.is_empty() {
        quote! {
            #[doc(hidden)]
            #[allow(non_camel_case_types)]
            #[derive(#krate::__private::serde::Deserialize, #krate::__private::schemars::JsonSchema)]
            #[serde(crate = #serde_crate, deny_unknown_fields)]
            #[schemars(crate = #schemars_crate)]
            #vis struct #args_ident {
                #(#fields)*
            }
            #(#defaults)*
        }
    } else {
        TokenStream2::new()
    };

    // The call of the body, with each parameter from where it comes.
    let mut call_args = Vec::new();
    let mut settings_load = TokenStream2::new();
    for (p, ident) in &params {
        match p {
            Param::Context => call_args.push(quote!(__ctx)),
            Param::Settings(ty) => {
                settings_load = quote! {
                    let __settings: #ty = #krate::__private::settings_or_default(__ctx).await?;
                };
                call_args.push(quote!(__settings));
            }
            Param::Args(_) => call_args.push(quote!(__args)),
            Param::Property(_) => call_args.push(quote!(__args.#ident)),
        }
    }
    let awaited = if function.sig.asyncness.is_some() {
        quote!(.await)
    } else {
        TokenStream2::new()
    };
    let value = if is_result {
        quote! {
            let __value = Self::invoke(#(#call_args),*)#awaited
                .map_err(#krate::__private::into_tool_error)?;
        }
    } else {
        quote! { let __value = Self::invoke(#(#call_args),*)#awaited; }
    };
    let (outcome, output_schema, object_check) = match &kind {
        Kind::Text => (
            quote!(::core::result::Result::Ok(#krate::ToolOutput::text(__value))),
            quote!(::core::option::Option::None),
            TokenStream2::new(),
        ),
        Kind::Output => (
            quote!(::core::result::Result::Ok(__value)),
            quote!(::core::option::Option::None),
            TokenStream2::new(),
        ),
        Kind::Diagnostics => (
            quote!(::core::result::Result::Ok(#krate::ToolOutput::from_diagnostics(__value))),
            quote!(::core::option::Option::None),
            TokenStream2::new(),
        ),
        Kind::Structured(t) | Kind::TextAnd(t) | Kind::Answer(t) => {
            let outcome = match &kind {
                Kind::TextAnd(_) => {
                    quote!(#krate::Structured::new(__value.1).text(__value.0).into_output())
                }
                Kind::Answer(_) => quote!(__value.into_output()),
                _ => quote!(#krate::Structured::new(__value).into_output()),
            };
            let check = quote_spanned! {t.span()=>
                const _: () = {
                    // A compile error here: the structured result is not an object (MCP
                    // asks for one); the message says what to write instead.
                    #[allow(dead_code)]
                    fn __toolhost_output_is_an_object() {
                        use #krate::__private::AnyOutput as _;
                        (&#krate::__private::OutputCheck::<#t>::new()).check();
                    }
                };
            };
            (
                outcome,
                quote!(::core::option::Option::Some(#krate::schema_for::<#t>())),
                check,
            )
        }
    };

    let requirements = {
        let env = &args.env;
        let programs = &args.programs;
        let mut r = quote!(#krate::Requirements::default());
        if !env.is_empty() {
            r = quote!(#r.env(&[#(#env),*]));
        }
        if !programs.is_empty() {
            r = quote!(#r.programs(&[#(#programs),*]));
        }
        if args.workspace {
            r = quote!(#r.workspace());
        }
        if let Some(task) = &args.task {
            r = quote!(#r.task(#krate::TaskSupport::#task));
        }
        r
    };
    let interactive = args.interactive;

    // The body becomes `NAME::invoke`, callable from Rust; the docs go on the unit struct
    // that is the tool.
    let docs: Vec<&Attribute> = function
        .attrs
        .iter()
        .filter(|a| a.path().is_ident("doc"))
        .collect();
    let other_attrs: Vec<&Attribute> = function
        .attrs
        .iter()
        .filter(|a| !a.path().is_ident("doc"))
        .collect();
    let mut invoke_sig = function.sig.clone();
    invoke_sig.ident = Ident::new("invoke", fn_ident.span());
    let block = &function.block;
    let invoke_doc = format!(
        "The body of the tool `{tool_name}`, called with its arguments as Rust values (the \
         tool itself is `{fn_ident}`, for `export_plugin!`)."
    );

    Ok(quote! {
        #(#docs)*
        #[allow(non_camel_case_types)]
        #[derive(::core::clone::Clone, ::core::marker::Copy, ::core::fmt::Debug, ::core::default::Default)]
        #vis struct #fn_ident;

        #args_struct

        impl #fn_ident {
            #[doc = #invoke_doc]
            #(#other_attrs)*
            #vis #invoke_sig #block
        }

        #object_check

        impl #krate::TypedTool for #fn_ident {
            type Args = #args_type;
            fn name(&self) -> &str {
                #tool_name
            }
            fn description(&self) -> &str {
                #description
            }
            fn risk(&self) -> #krate::Risk {
                #krate::Risk::#risk
            }
            fn interactive(&self) -> bool {
                #interactive
            }
            fn requirements(&self) -> #krate::Requirements {
                #requirements
            }
            fn output_schema(&self) -> ::core::option::Option<#krate::__private::serde_json::Value> {
                #output_schema
            }
            async fn run(
                &self,
                __ctx: &#krate::ToolContext<'_>,
                __args: Self::Args,
            ) -> ::core::result::Result<::std::string::String, #krate::ToolError> {
                #krate::__private::output_text(#krate::TypedTool::run_output(self, __ctx, __args).await)
            }
            #[allow(unused_variables)]
            async fn run_output(
                &self,
                __ctx: &#krate::ToolContext<'_>,
                __args: Self::Args,
            ) -> ::core::result::Result<#krate::ToolOutput, #krate::ToolError> {
                #settings_load
                #value
                #outcome
            }
        }
    })
}

fn bound_parts(min: &Option<Expr>, max: &Option<Expr>) -> TokenStream2 {
    match (min, max) {
        (Some(a), Some(b)) => quote!(min = #a, max = #b),
        (Some(a), None) => quote!(min = #a),
        (None, Some(b)) => quote!(max = #b),
        (None, None) => TokenStream2::new(),
    }
}
