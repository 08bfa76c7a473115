//! HTTP trigger routes: `/hello` matches exactly, `/api/...` matches a whole subtree.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The suffix that turns a route into a prefix match.
const WILDCARD: &str = "/...";

/// A validated HTTP route, as written in `[[triggers.http]] route = "..."`.
///
/// Two forms exist:
/// - exact: `/hello` matches the path `/hello` only;
/// - prefix: `/api/...` matches `/api` and every path below it (`/api/`, `/api/users/1`),
///   but not `/apiary`. `/...` matches every path.
///
/// Routes are compared against the request *path* only; the caller strips the query
/// string first.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Route {
    raw: String,
}

/// Why a string is not a valid [`Route`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    /// Routes are absolute paths.
    #[error("route `{0}` must start with `/`")]
    MissingLeadingSlash(String),
    /// Whitespace, control characters, `?` and `#` can never appear in a request path
    /// the gateway compares against, so such a route could never match.
    #[error("route `{route}` must not contain {found:?}")]
    InvalidChar {
        /// The rejected route.
        route: String,
        /// The first offending character.
        found: char,
    },
    /// `//` would only match un-normalised paths, which is almost certainly a typo.
    #[error("route `{0}` must not contain an empty segment (`//`)")]
    EmptySegment(String),
    /// Longer than [`MAX_ROUTE_LEN`].
    #[error("route `{0}` is {1} bytes long; a route may have at most {MAX_ROUTE_LEN}")]
    TooLong(String, usize),
    /// `...` is only meaningful as the final segment.
    #[error("route `{0}` may only use `...` as its last segment, as in `/api/...`")]
    MisplacedWildcard(String),
}

/// The longest route a manifest may declare, in bytes: far beyond any real path. The
/// route table and the check of a deploy's routes against every other tenant's work
/// through a route segment by segment, comparing prefixes, so a route of a megabyte
/// made each deploy beside it take seconds.
pub const MAX_ROUTE_LEN: usize = 1024;

impl Route {
    /// [`Route::parse`] for a route a manifest declares, which is also at most
    /// [`MAX_ROUTE_LEN`] bytes. Only new declarations are held to that: a route read
    /// back from a deployment record or a saved workflow (written by a version without
    /// the limit, see [`crate::Provenance::Saved`]) still parses, or one such record
    /// would fail every read of them all, or stay out of service after an upgrade.
    pub fn parse_declared(route: &str) -> Result<Route, RouteError> {
        if route.len() > MAX_ROUTE_LEN {
            let start = faas_karmem_compiler::shorten(route).into_owned();
            return Err(RouteError::TooLong(start, route.len()));
        }
        Route::parse(route)
    }

    /// Validates `route`: it must start with `/`, contain no whitespace, control
    /// characters, `?`, `#` or `//`, and may end in `/...` to match a prefix.
    pub fn parse(route: &str) -> Result<Route, RouteError> {
        if !route.starts_with('/') {
            return Err(RouteError::MissingLeadingSlash(route.to_owned()));
        }
        if let Some(found) = route
            .chars()
            .find(|c| c.is_whitespace() || c.is_control() || matches!(c, '?' | '#'))
        {
            return Err(RouteError::InvalidChar {
                route: route.to_owned(),
                found,
            });
        }
        if route.contains("//") {
            return Err(RouteError::EmptySegment(route.to_owned()));
        }
        let body = route.strip_suffix(WILDCARD).unwrap_or(route);
        if body.contains("...") {
            return Err(RouteError::MisplacedWildcard(route.to_owned()));
        }
        Ok(Route {
            raw: route.to_owned(),
        })
    }

    /// The route as written in the manifest, e.g. `/api/...`.
    pub fn as_str(&self) -> &str {
        &self.raw
    }

    /// The path below which this route matches (`/api` for `/api/...`, the empty string
    /// for `/...`), or `None` for an exact route.
    pub fn prefix(&self) -> Option<&str> {
        self.raw.strip_suffix(WILDCARD)
    }

    /// Whether this is a prefix route (ends in `/...`).
    pub fn is_prefix(&self) -> bool {
        self.prefix().is_some()
    }

    /// Whether a request for `path` (without query string) is handled by this route.
    pub fn matches(&self, path: &str) -> bool {
        match self.prefix() {
            None => path == self.raw,
            // Match on a segment boundary so `/api/...` does not claim `/apiary`.
            Some(prefix) => path
                .strip_prefix(prefix)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/')),
        }
    }

    /// Whether some request path is matched by both routes: one lies under the other
    /// (`/shop/checkout` under `/shop/...`, `/shop/a/...` under `/shop/...`), or they
    /// are the same. Segment-based, like [`Route::matches`]: `/shop/...` and
    /// `/shopping` do not overlap.
    pub fn overlaps(&self, other: &Route) -> bool {
        match (self.prefix(), other.prefix()) {
            (None, None) => self.raw == other.raw,
            (Some(_), None) => self.matches(&other.raw),
            (None, Some(_)) => other.matches(&self.raw),
            // Two subtrees meet when one's root lies in the other.
            (Some(mine), Some(theirs)) => self.matches(theirs) || other.matches(mine),
        }
    }

    /// Whether this is the catch-all `/...`, which matches every path.
    pub fn is_catch_all(&self) -> bool {
        self.prefix() == Some("")
    }

    /// A sort key for choosing among several matching routes: the greatest wins.
    ///
    /// It is `(is_exact, length)`, where `length` is the byte length of the exact path or
    /// of the prefix. So an exact route beats any prefix route, and among prefix routes
    /// the longer (more specific) prefix wins. Distinct routes that match the same path
    /// never have equal specificity.
    pub fn specificity(&self) -> (bool, usize) {
        match self.prefix() {
            None => (true, self.raw.len()),
            Some(prefix) => (false, prefix.len()),
        }
    }
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.raw)
    }
}

impl FromStr for Route {
    type Err = RouteError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Route::parse(s)
    }
}

impl TryFrom<String> for Route {
    type Error = RouteError;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        Route::parse(&s)
    }
}

impl From<Route> for String {
    fn from(route: Route) -> String {
        route.raw
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(s: &str) -> Route {
        Route::parse(s).unwrap()
    }

    #[test]
    fn exact_route_matches_only_its_own_path() {
        let r = route("/hello");
        assert!(r.matches("/hello"));
        assert!(!r.matches("/hello/"));
        assert!(!r.matches("/hello/world"));
        assert!(!r.matches("/hell"));
        assert!(!r.matches("/helloworld"));
    }

    #[test]
    fn prefix_route_matches_its_root_and_everything_below() {
        let r = route("/api/...");
        assert!(r.matches("/api"));
        assert!(r.matches("/api/"));
        assert!(r.matches("/api/users/1"));
    }

    #[test]
    fn prefix_route_does_not_match_a_sibling_sharing_its_letters() {
        let r = route("/api/...");
        assert!(!r.matches("/apiary"));
        assert!(!r.matches("/ap"));
        assert!(!r.matches("/"));
    }

    #[test]
    fn root_wildcard_matches_every_path() {
        let r = route("/...");
        assert!(r.matches("/"));
        assert!(r.matches("/anything/at/all"));
    }

    #[test]
    fn root_route_matches_only_root() {
        let r = route("/");
        assert!(r.matches("/"));
        assert!(!r.matches("/x"));
    }

    #[test]
    fn exact_routes_are_more_specific_than_prefix_routes() {
        assert!(route("/a").specificity() > route("/a/...").specificity());
        assert!(route("/").specificity() > route("/a/b/c/...").specificity());
    }

    #[test]
    fn longer_prefixes_are_more_specific_than_shorter_ones() {
        assert!(route("/a/b/...").specificity() > route("/a/...").specificity());
        assert!(route("/a/...").specificity() > route("/...").specificity());
    }

    #[test]
    fn a_route_under_or_over_another_overlaps_it_both_ways() {
        for (a, b) in [
            ("/shop/...", "/shop/checkout"),
            ("/shop/...", "/shop"),
            ("/shop/...", "/shop/a/..."),
            ("/shop/...", "/shop/..."),
            ("/shop/checkout", "/shop/checkout"),
            ("/...", "/anything"),
            ("/...", "/a/..."),
        ] {
            assert!(route(a).overlaps(&route(b)), "{a} {b}");
            assert!(route(b).overlaps(&route(a)), "{b} {a}");
        }
    }

    #[test]
    fn siblings_and_shared_letters_do_not_overlap() {
        for (a, b) in [
            ("/shop/...", "/shopping"),
            ("/shop/...", "/shopping/..."),
            ("/shop/a/...", "/shop/b/..."),
            ("/shop/a/...", "/shop"),
            ("/shop/checkout", "/shop/cart"),
            ("/shop", "/shop/"),
        ] {
            assert!(!route(a).overlaps(&route(b)), "{a} {b}");
            assert!(!route(b).overlaps(&route(a)), "{b} {a}");
        }
    }

    #[test]
    fn only_the_root_wildcard_is_the_catch_all() {
        assert!(route("/...").is_catch_all());
        assert!(!route("/a/...").is_catch_all());
        assert!(!route("/").is_catch_all());
    }

    #[test]
    fn routes_without_a_leading_slash_are_rejected() {
        assert_eq!(
            Route::parse("hello"),
            Err(RouteError::MissingLeadingSlash("hello".into()))
        );
        assert!(Route::parse("").is_err());
    }

    #[test]
    fn routes_with_spaces_queries_or_fragments_are_rejected() {
        for bad in ["/a b", "/a?b=1", "/a#top", "/a\tb"] {
            assert!(
                matches!(Route::parse(bad), Err(RouteError::InvalidChar { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn wildcard_is_only_allowed_as_the_last_segment() {
        assert!(Route::parse("/a/.../b").is_err());
        assert!(Route::parse("/a...").is_err());
        assert!(Route::parse("/a/...").is_ok());
    }

    #[test]
    fn empty_segments_are_rejected() {
        assert!(Route::parse("//a").is_err());
        assert!(Route::parse("/a//b").is_err());
    }

    #[test]
    fn route_displays_and_serializes_as_written() {
        let r = route("/api/...");
        assert_eq!(r.to_string(), "/api/...");
        assert_eq!(r.as_str(), "/api/...");
        assert_eq!(serde_json::to_string(&r).unwrap(), r#""/api/...""#);
        let back: Route = serde_json::from_str(r#""/api/...""#).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn deserializing_an_invalid_route_fails() {
        assert!(serde_json::from_str::<Route>(r#""nope""#).is_err());
    }
}
