//! Semantic guards on Rust source, parsed with `syn` (never substring
//! matches): required symbols (an item is defined) and invocation seams (a
//! function contains a call).
//!
//! Seams walk the caller's body: ordinary calls come from syn's expression
//! tree, and the token streams of macro invocations (`tokio::select!`,
//! `tracing::info!`, `matches!`, …) are scanned token by token, recursively.
//! Comments and string literals are never tokens that can match.

use proc_macro2::{Delimiter, Spacing, TokenStream, TokenTree};
use syn::visit::Visit;

/// Where a definition sits: enclosing modules, impl types and traits.
type Qualifiers = Vec<String>;

/// A parsed callee of a seam.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Callee {
    /// `a::b::c`: a call whose path ends with these segments.
    Path(Vec<String>),
    /// `.name`: a method call.
    Method(String),
}

impl Callee {
    /// Parses `a::b::c` or `.name`.
    ///
    /// # Errors
    /// When the text is neither form.
    pub fn parse(text: &str) -> Result<Callee, String> {
        let text = text.trim();
        if let Some(name) = text.strip_prefix('.') {
            return if is_ident(name) {
                Ok(Callee::Method(name.to_owned()))
            } else {
                Err(format!(
                    "callee {text:?}: `.` must be followed by a method name"
                ))
            };
        }
        let segments: Vec<String> = text.split("::").map(|s| s.trim().to_owned()).collect();
        if segments.iter().all(|s| is_ident(s)) {
            Ok(Callee::Path(segments))
        } else {
            Err(format!(
                "callee {text:?} is neither a path (a::b::c) nor a method (.name)"
            ))
        }
    }
}

fn is_ident(s: &str) -> bool {
    let s = s.strip_prefix("r#").unwrap_or(s);
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_alphabetic() || c == '_')
        && chars.all(|c| c.is_alphanumeric() || c == '_')
}

fn plain(ident: &syn::Ident) -> String {
    let s = ident.to_string();
    s.strip_prefix("r#").map_or(s.clone(), str::to_owned)
}

/// Splits `a::b::c` into qualifier segments and the final name.
fn split_qualified(text: &str) -> (Vec<String>, String) {
    let mut parts: Vec<String> = text.split("::").map(|s| s.trim().to_owned()).collect();
    let name = parts.pop().unwrap_or_default();
    (parts, name)
}

/// `wanted` (outermost first) is a suffix of `have`.
fn qualifiers_match(have: &[String], wanted: &[String]) -> bool {
    wanted.len() <= have.len() && have[have.len() - wanted.len()..] == *wanted
}

fn type_name(ty: &syn::Type) -> String {
    match ty {
        syn::Type::Path(p) => p
            .path
            .segments
            .last()
            .map(|s| plain(&s.ident))
            .unwrap_or_default(),
        syn::Type::Reference(r) => type_name(&r.elem),
        syn::Type::Paren(p) => type_name(&p.elem),
        syn::Type::Group(g) => type_name(&g.elem),
        _ => String::new(),
    }
}

/// Collects item definitions and function bodies with their qualifiers.
#[derive(Default)]
struct Collector<'ast> {
    scope: Qualifiers,
    items: Vec<(Qualifiers, String)>,
    functions: Vec<(Qualifiers, String, &'ast syn::Block)>,
}

impl Collector<'_> {
    fn define(&mut self, ident: &syn::Ident) {
        self.items.push((self.scope.clone(), plain(ident)));
    }
}

impl<'ast> Visit<'ast> for Collector<'ast> {
    fn visit_item_fn(&mut self, i: &'ast syn::ItemFn) {
        self.define(&i.sig.ident);
        self.functions
            .push((self.scope.clone(), plain(&i.sig.ident), &i.block));
        syn::visit::visit_item_fn(self, i);
    }
    fn visit_item_struct(&mut self, i: &'ast syn::ItemStruct) {
        self.define(&i.ident);
        syn::visit::visit_item_struct(self, i);
    }
    fn visit_item_enum(&mut self, i: &'ast syn::ItemEnum) {
        self.define(&i.ident);
        syn::visit::visit_item_enum(self, i);
    }
    fn visit_item_union(&mut self, i: &'ast syn::ItemUnion) {
        self.define(&i.ident);
        syn::visit::visit_item_union(self, i);
    }
    fn visit_item_const(&mut self, i: &'ast syn::ItemConst) {
        self.define(&i.ident);
        syn::visit::visit_item_const(self, i);
    }
    fn visit_item_static(&mut self, i: &'ast syn::ItemStatic) {
        self.define(&i.ident);
        syn::visit::visit_item_static(self, i);
    }
    fn visit_item_type(&mut self, i: &'ast syn::ItemType) {
        self.define(&i.ident);
        syn::visit::visit_item_type(self, i);
    }
    fn visit_item_macro(&mut self, i: &'ast syn::ItemMacro) {
        if let Some(ident) = &i.ident {
            self.define(ident);
        }
        syn::visit::visit_item_macro(self, i);
    }
    fn visit_item_mod(&mut self, i: &'ast syn::ItemMod) {
        self.define(&i.ident);
        self.scope.push(plain(&i.ident));
        syn::visit::visit_item_mod(self, i);
        self.scope.pop();
    }
    fn visit_item_trait(&mut self, i: &'ast syn::ItemTrait) {
        self.define(&i.ident);
        self.scope.push(plain(&i.ident));
        syn::visit::visit_item_trait(self, i);
        self.scope.pop();
    }
    fn visit_item_impl(&mut self, i: &'ast syn::ItemImpl) {
        self.scope.push(type_name(&i.self_ty));
        syn::visit::visit_item_impl(self, i);
        self.scope.pop();
    }
    fn visit_impl_item_fn(&mut self, i: &'ast syn::ImplItemFn) {
        self.define(&i.sig.ident);
        self.functions
            .push((self.scope.clone(), plain(&i.sig.ident), &i.block));
        syn::visit::visit_impl_item_fn(self, i);
    }
    fn visit_impl_item_const(&mut self, i: &'ast syn::ImplItemConst) {
        self.define(&i.ident);
        syn::visit::visit_impl_item_const(self, i);
    }
    fn visit_impl_item_type(&mut self, i: &'ast syn::ImplItemType) {
        self.define(&i.ident);
        syn::visit::visit_impl_item_type(self, i);
    }
    fn visit_trait_item_fn(&mut self, i: &'ast syn::TraitItemFn) {
        self.define(&i.sig.ident);
        if let Some(block) = &i.default {
            self.functions
                .push((self.scope.clone(), plain(&i.sig.ident), block));
        }
        syn::visit::visit_trait_item_fn(self, i);
    }
    fn visit_trait_item_const(&mut self, i: &'ast syn::TraitItemConst) {
        self.define(&i.ident);
        syn::visit::visit_trait_item_const(self, i);
    }
    fn visit_trait_item_type(&mut self, i: &'ast syn::TraitItemType) {
        self.define(&i.ident);
        syn::visit::visit_trait_item_type(self, i);
    }
}

fn parse(source: &str) -> Result<syn::File, String> {
    syn::parse_file(source).map_err(|e| format!("does not parse as Rust: {e}"))
}

/// Whether `symbol` (`name` or `Qualifier::name`) is defined as an item (fn,
/// struct, enum, union, const, static, trait, type, mod, macro) or as a
/// method, associated const or type in an impl or trait.
///
/// # Errors
/// When the source does not parse.
pub fn has_symbol(source: &str, symbol: &str) -> Result<bool, String> {
    let file = parse(source)?;
    let mut c = Collector::default();
    c.visit_file(&file);
    let (quals, name) = split_qualified(symbol);
    Ok(c.items
        .iter()
        .any(|(scope, n)| *n == name && qualifiers_match(scope, &quals)))
}

/// The outcome of a seam check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeamCheck {
    /// The caller contains the call.
    Found,
    /// No function named like the caller.
    CallerMissing,
    /// The caller exists but does not contain the call.
    CallMissing,
}

/// Whether the function or method `caller` (`name` or `Type::name` /
/// `module::name`) contains a call to `callee` in `source`.
///
/// # Errors
/// When the source does not parse or the callee is malformed.
pub fn check_seam(source: &str, caller: &str, callee: &str) -> Result<SeamCheck, String> {
    let callee = Callee::parse(callee)?;
    let file = parse(source)?;
    let mut c = Collector::default();
    c.visit_file(&file);
    let (quals, name) = split_qualified(caller);
    let mut found_caller = false;
    for (scope, n, block) in &c.functions {
        if *n != name || !qualifiers_match(scope, &quals) {
            continue;
        }
        found_caller = true;
        let mut finder = CallFinder {
            callee: &callee,
            found: false,
        };
        finder.visit_block(block);
        if finder.found {
            return Ok(SeamCheck::Found);
        }
    }
    Ok(if found_caller {
        SeamCheck::CallMissing
    } else {
        SeamCheck::CallerMissing
    })
}

/// Looks for the callee in a body: calls via the syntax tree, and macro
/// invocations via their tokens.
struct CallFinder<'c> {
    callee: &'c Callee,
    found: bool,
}

impl<'ast> Visit<'ast> for CallFinder<'_> {
    fn visit_expr_call(&mut self, i: &'ast syn::ExprCall) {
        if let (Callee::Path(want), syn::Expr::Path(p)) = (self.callee, &*i.func) {
            let have: Vec<String> = p.path.segments.iter().map(|s| plain(&s.ident)).collect();
            if qualifiers_match(&have, want) {
                self.found = true;
            }
        }
        syn::visit::visit_expr_call(self, i);
    }

    fn visit_expr_method_call(&mut self, i: &'ast syn::ExprMethodCall) {
        if let Callee::Method(want) = self.callee
            && plain(&i.method) == *want
        {
            self.found = true;
        }
        syn::visit::visit_expr_method_call(self, i);
    }

    fn visit_macro(&mut self, i: &'ast syn::Macro) {
        if tokens_contain_call(i.tokens.clone(), self.callee) {
            self.found = true;
        }
        syn::visit::visit_macro(self, i);
    }
}

/// Scans a token stream (recursively through groups) for a call to `callee`.
#[must_use]
pub fn tokens_contain_call(stream: TokenStream, callee: &Callee) -> bool {
    let tokens: Vec<TokenTree> = stream.into_iter().collect();
    for (i, token) in tokens.iter().enumerate() {
        if let TokenTree::Group(g) = token {
            if tokens_contain_call(g.stream(), callee) {
                return true;
            }
            continue;
        }
        let TokenTree::Ident(ident) = token else {
            continue;
        };
        if !followed_by_call_args(&tokens, i + 1) {
            continue;
        }
        let name = plain(ident);
        let after_dot = is_punct(tokens.get(i.wrapping_sub(1)), '.')
            && !is_punct(tokens.get(i.wrapping_sub(2)), '.');
        match callee {
            Callee::Method(want) => {
                if after_dot && name == *want {
                    return true;
                }
            }
            Callee::Path(want) => {
                if after_dot || is_fn_keyword(tokens.get(i.wrapping_sub(1))) {
                    continue;
                }
                let have = path_ending_at(&tokens, i);
                if qualifiers_match(&have, want) {
                    return true;
                }
            }
        }
    }
    false
}

fn is_punct(t: Option<&TokenTree>, c: char) -> bool {
    matches!(t, Some(TokenTree::Punct(p)) if p.as_char() == c)
}

fn is_fn_keyword(t: Option<&TokenTree>) -> bool {
    matches!(t, Some(TokenTree::Ident(i)) if *i == "fn")
}

fn is_path_sep(tokens: &[TokenTree], at: usize) -> bool {
    matches!(
        (tokens.get(at), tokens.get(at + 1)),
        (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b)))
            if a.as_char() == ':' && a.spacing() == Spacing::Joint && b.as_char() == ':'
    )
}

/// Index just past the `>` that closes the `<` at `open`.
fn skip_angles_forward(tokens: &[TokenTree], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (j, t) in tokens.iter().enumerate().skip(open) {
        if let TokenTree::Punct(p) = t {
            match p.as_char() {
                '<' => depth += 1,
                '>' if !is_punct(tokens.get(j.wrapping_sub(1)), '-') => {
                    depth = depth.checked_sub(1)?;
                    if depth == 0 {
                        return Some(j + 1);
                    }
                }
                _ => {}
            }
        }
    }
    None
}

/// Whether the tokens at `at` are call arguments: `( … )` or `::<…>( … )`.
fn followed_by_call_args(tokens: &[TokenTree], at: usize) -> bool {
    let mut at = at;
    if is_path_sep(tokens, at) && is_punct(tokens.get(at + 2), '<') {
        match skip_angles_forward(tokens, at + 2) {
            Some(next) => at = next,
            None => return false,
        }
    }
    matches!(tokens.get(at), Some(TokenTree::Group(g)) if g.delimiter() == Delimiter::Parenthesis)
}

/// Index of the `<` matching the `>` at `close`.
fn skip_angles_backward(tokens: &[TokenTree], close: usize) -> Option<usize> {
    let mut depth = 0usize;
    for j in (0..=close).rev() {
        if let TokenTree::Punct(p) = &tokens[j] {
            match p.as_char() {
                '>' if !is_punct(tokens.get(j.wrapping_sub(1)), '-') => depth += 1,
                '<' => {
                    depth = depth.checked_sub(1)?;
                    if depth == 0 {
                        return Some(j);
                    }
                }
                _ => {}
            }
        }
    }
    None
}

/// The path segments (outermost first) of a path ending with the ident at `end`.
fn path_ending_at(tokens: &[TokenTree], end: usize) -> Vec<String> {
    let mut segments = Vec::new();
    if let TokenTree::Ident(i) = &tokens[end] {
        segments.push(plain(i));
    }
    let mut at = end;
    loop {
        // Expect `::` right before `at`.
        if at < 2 || !is_path_sep(tokens, at - 2) {
            break;
        }
        let mut prev = at - 2;
        if prev == 0 {
            break;
        }
        prev -= 1;
        if is_punct(tokens.get(prev), '>') {
            // `Seg::<T>::next`: skip the turbofish back to `Seg`.
            let Some(open) = skip_angles_backward(tokens, prev) else {
                break;
            };
            if open < 2 || !is_path_sep(tokens, open - 2) {
                break; // `<T as Trait>::` – a qualified self type ends the path.
            }
            if open - 2 == 0 {
                break;
            }
            prev = open - 3;
        }
        match &tokens[prev] {
            TokenTree::Ident(i) => {
                segments.push(plain(i));
                at = prev;
            }
            _ => break,
        }
    }
    segments.reverse();
    segments
}

/// Every required symbol and seam of `entry` that is missing from the files
/// `read` returns (`None` = the file does not exist), as one message each.
/// `check` reads the working overlay, `sync` a commit's tree; the rules and
/// the wording are the same.
///
/// # Errors
/// Whatever `read` returns.
pub fn entry_problems<E>(
    entry: &crate::registry::PatchEntry,
    mut read: impl FnMut(&str) -> Result<Option<String>, E>,
) -> Result<Vec<String>, E> {
    let mut problems = Vec::new();
    for s in &entry.required_symbols {
        match read(&s.path)? {
            None => problems.push(format!(
                "required symbol {}: file {} does not exist",
                s.symbol, s.path
            )),
            Some(src) => match has_symbol(&src, &s.symbol) {
                Ok(true) => {}
                Ok(false) => problems.push(format!(
                    "required symbol {} is not defined in {}",
                    s.symbol, s.path
                )),
                Err(e) => problems.push(format!("{} {e}", s.path)),
            },
        }
    }
    for s in &entry.seams {
        match read(&s.path)? {
            None => problems.push(format!(
                "seam {} → {}: file {} does not exist",
                s.caller, s.callee, s.path
            )),
            Some(src) => match check_seam(&src, &s.caller, &s.callee) {
                Ok(SeamCheck::Found) => {}
                Ok(SeamCheck::CallerMissing) => problems.push(format!(
                    "seam {} → {}: no function {} in {}",
                    s.caller, s.callee, s.caller, s.path
                )),
                Ok(SeamCheck::CallMissing) => problems.push(format!(
                    "seam {} → {}: {} does not call {} in {}",
                    s.caller, s.callee, s.caller, s.callee, s.path
                )),
                Err(e) => problems.push(format!("{}: {e}", s.path)),
            },
        }
    }
    Ok(problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: &str = r#"
        use crate::resume;

        pub struct Pool;
        pub const LIMIT: usize = 3;

        impl Pool {
            pub async fn ensure_session(&self) {
                // resume::plan_resume(self) is mentioned only in this comment
                let note = "resume::plan_resume(x) and .invalidate() in a string";
                let plan = crate::x::resume::plan_resume(self);
                tracing::info!(value = %plan.describe(), "planned");
                tokio::select! {
                    _ = self.store.invalidate_for_fresh_session::<u8>() => {}
                }
                let _ = matches!(helper::classify(&plan), Some(_));
            }

            fn quiet(&self) {
                // self.flush()
                let _ = "flush()";
            }

            fn turbo(&self) {
                let v = Vec::<u8>::with_capacity(2);
                let _ = v;
            }
        }

        mod inner {
            pub fn nested() { super::resume::plan_resume(1); }
            pub trait Store { fn reset(&self) { reset_all() } }
        }

        fn free() { (0..len(3)).count(); }
    "#;

    fn seam(caller: &str, callee: &str) -> SeamCheck {
        check_seam(SRC, caller, callee).unwrap()
    }

    #[test]
    fn path_suffix_matching() {
        assert_eq!(
            seam("ensure_session", "resume::plan_resume"),
            SeamCheck::Found
        );
        assert_eq!(seam("ensure_session", "plan_resume"), SeamCheck::Found);
        assert_eq!(
            seam("ensure_session", "x::resume::plan_resume"),
            SeamCheck::Found
        );
        // Longer than the written path: the call's trailing segments lack `other`.
        assert_eq!(
            seam("ensure_session", "other::resume::plan_resume"),
            SeamCheck::CallMissing
        );
        assert_eq!(seam("Pool::turbo", "Vec::with_capacity"), SeamCheck::Found);
    }

    #[test]
    fn method_matching() {
        assert_eq!(
            seam("Pool::ensure_session", ".invalidate_for_fresh_session"),
            SeamCheck::Found
        );
        assert_eq!(seam("ensure_session", ".describe"), SeamCheck::Found);
        assert_eq!(seam("ensure_session", ".nope"), SeamCheck::CallMissing);
        // A method callee does not match a path call and vice versa.
        assert_eq!(
            seam("ensure_session", ".plan_resume"),
            SeamCheck::CallMissing
        );
        assert_eq!(seam("ensure_session", "describe"), SeamCheck::CallMissing);
    }

    #[test]
    fn calls_inside_macros_count() {
        // tokio::select! and matches! bodies are token streams, not expressions.
        assert_eq!(seam("ensure_session", "helper::classify"), SeamCheck::Found);
        assert_eq!(
            seam("ensure_session", ".invalidate_for_fresh_session"),
            SeamCheck::Found
        );
    }

    #[test]
    fn comments_and_strings_never_match() {
        assert_eq!(seam("quiet", ".flush"), SeamCheck::CallMissing);
        assert_eq!(seam("quiet", "flush"), SeamCheck::CallMissing);
        assert_eq!(seam("Pool::quiet", ".invalidate"), SeamCheck::CallMissing);
    }

    #[test]
    fn caller_lookup() {
        assert_eq!(seam("nested", "resume::plan_resume"), SeamCheck::Found);
        assert_eq!(seam("inner::nested", "plan_resume"), SeamCheck::Found);
        assert_eq!(seam("Store::reset", "reset_all"), SeamCheck::Found);
        assert_eq!(
            seam("Other::ensure_session", "plan_resume"),
            SeamCheck::CallerMissing
        );
        assert_eq!(seam("missing", "plan_resume"), SeamCheck::CallerMissing);
        assert_eq!(seam("free", "len"), SeamCheck::Found);
    }

    #[test]
    fn token_scanner_handles_ranges_and_definitions() {
        let ts: TokenStream = "a..b(1); fn plan(x: u8) {} x.plan::<u8>(2)"
            .parse()
            .unwrap();
        assert!(!tokens_contain_call(
            ts.clone(),
            &Callee::Method("b".into())
        ));
        assert!(tokens_contain_call(
            ts.clone(),
            &Callee::Path(vec!["b".into()])
        ));
        assert!(!tokens_contain_call(
            ts.clone(),
            &Callee::Path(vec!["plan".into()])
        ));
        assert!(tokens_contain_call(ts, &Callee::Method("plan".into())));
        let ts: TokenStream = "crate::x::a::b::c(1); <T as Tr>::m(2)".parse().unwrap();
        let path = |s: &str| Callee::parse(s).unwrap();
        assert!(tokens_contain_call(ts.clone(), &path("a::b::c")));
        assert!(tokens_contain_call(ts.clone(), &path("b::c")));
        assert!(!tokens_contain_call(ts.clone(), &path("y::a::b::c")));
        assert!(tokens_contain_call(ts.clone(), &path("m")));
        assert!(!tokens_contain_call(ts, &path("Tr::m")));
    }

    #[test]
    fn symbols() {
        let has = |s: &str| has_symbol(SRC, s).unwrap();
        assert!(has("Pool"));
        assert!(has("LIMIT"));
        assert!(has("ensure_session"));
        assert!(has("Pool::ensure_session"));
        assert!(has("inner::nested"));
        assert!(has("Store::reset"));
        assert!(has("inner"));
        // Mentioned only in comments/strings or calls: not defined.
        assert!(!has("plan_resume"));
        assert!(!has("flush"));
        assert!(!has("Other::ensure_session"));
    }

    #[test]
    fn callee_parsing() {
        assert_eq!(
            Callee::parse("a::b").unwrap(),
            Callee::Path(vec!["a".into(), "b".into()])
        );
        assert_eq!(Callee::parse(".m").unwrap(), Callee::Method("m".into()));
        assert!(Callee::parse("a b").is_err());
        assert!(Callee::parse(".").is_err());
    }

    #[test]
    fn unparsable_source_is_an_error() {
        assert!(has_symbol("fn (", "x").is_err());
    }
}
