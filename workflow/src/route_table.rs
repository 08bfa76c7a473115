//! Finding the route that serves a request path among every deployed workflow's
//! routes, in a few hash lookups however many routes there are.
//!
//! The gateway looks a route up for every request, and the table holds every tenant's
//! routes: a lookup that scanned them would let one tenant, by deploying many routes,
//! slow every other tenant's requests. A path is looked up as an exact route first,
//! then as a prefix route (`/api/...`) at each length some prefix route has, longest
//! first, where the path has a segment boundary; so a lookup costs one hash of the path
//! and at most one more per distinct prefix length in the table, whatever the path
//! (a path of thousands of segments is not cut at each one).

use std::collections::HashMap;

use crate::route::Route;

/// Values (what a route leads to) by route, found by request path as
/// [`Route::matches`] and [`Route::specificity`] say: an exact route before any prefix
/// route, a longer prefix before a shorter one.
#[derive(Debug, Clone)]
pub struct RouteTable<T> {
    exact: HashMap<String, T>,
    /// Prefix routes by their prefix (`/api` for `/api/...`, empty for `/...`).
    prefixes: HashMap<String, T>,
    /// The distinct lengths of those prefixes, longest first.
    prefix_lengths: Vec<usize>,
    /// How many prefixes have each of those lengths, so that a removal knows when a
    /// length goes.
    prefixes_by_length: HashMap<usize, usize>,
}

impl<T> Default for RouteTable<T> {
    fn default() -> Self {
        Self {
            exact: HashMap::new(),
            prefixes: HashMap::new(),
            prefix_lengths: Vec::new(),
            prefixes_by_length: HashMap::new(),
        }
    }
}

impl<T> RouteTable<T> {
    /// The table of `routes`. Of two equal routes, the first is kept: deploys refuse
    /// a route that another workflow serves, so a table never gets two.
    pub fn new(routes: impl IntoIterator<Item = (Route, T)>) -> Self {
        let mut table = Self::default();
        for (route, value) in routes {
            table.insert(&route, value);
        }
        table
    }

    /// Adds `route`, leading to `value`, unless the table has that route already: then
    /// it keeps the one it has, as [`Self::new`] does.
    pub fn insert(&mut self, route: &Route, value: T) {
        let Some(prefix) = route.prefix() else {
            self.exact.entry(route.as_str().to_owned()).or_insert(value);
            return;
        };
        if self.prefixes.contains_key(prefix) {
            return;
        }
        self.prefixes.insert(prefix.to_owned(), value);
        let count = self.prefixes_by_length.entry(prefix.len()).or_default();
        *count += 1;
        if *count == 1 {
            let at = self
                .prefix_lengths
                .partition_point(|&len| len > prefix.len());
            self.prefix_lengths.insert(at, prefix.len());
        }
    }

    /// Takes `route` out if `is_this` says the value it leads to is the one to take out
    /// (another holder's equal route, kept by [`Self::insert`], stays).
    pub fn remove_if(&mut self, route: &Route, is_this: impl FnOnce(&T) -> bool) {
        let (map, key) = match route.prefix() {
            Some(prefix) => (&mut self.prefixes, prefix),
            None => (&mut self.exact, route.as_str()),
        };
        if !map.get(key).is_some_and(is_this) {
            return;
        }
        map.remove(key);
        let Some(prefix) = route.prefix() else {
            return;
        };
        let count = self.prefixes_by_length.entry(prefix.len()).or_default();
        *count -= 1;
        if *count == 0 {
            self.prefixes_by_length.remove(&prefix.len());
            self.prefix_lengths.retain(|&len| len != prefix.len());
        }
    }

    /// What serves a request for `path` (without its query string), if any route does.
    pub fn find(&self, path: &str) -> Option<&T> {
        self.find_counting(path).0
    }

    /// [`RouteTable::find`], and how many prefixes it looked up.
    fn find_counting(&self, path: &str) -> (Option<&T>, usize) {
        if let Some(value) = self.exact.get(path) {
            return (Some(value), 0);
        }
        let mut looked_up = 0;
        for &len in &self.prefix_lengths {
            // A prefix matches on a segment boundary: the whole path, or up to a `/`.
            let boundary = path.len() == len || path.as_bytes().get(len) == Some(&b'/');
            let Some(candidate) = path.get(..len).filter(|_| boundary) else {
                continue;
            };
            looked_up += 1;
            if let Some(value) = self.prefixes.get(candidate) {
                return (Some(value), looked_up);
            }
        }
        (None, looked_up)
    }

    /// How many routes it holds.
    pub fn len(&self) -> usize {
        self.exact.len() + self.prefixes.len()
    }

    /// Whether it holds no route.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(text: &str) -> Route {
        Route::parse(text).unwrap()
    }

    /// The route a scan of all of them finds: the most specific that matches.
    fn scanned<'a>(routes: &'a [Route], path: &str) -> Option<&'a Route> {
        routes
            .iter()
            .filter(|route| route.matches(path))
            .max_by_key(|route| route.specificity())
    }

    #[test]
    fn it_finds_what_a_scan_of_every_route_finds() {
        let routes: Vec<Route> = [
            "/...",
            "/api/...",
            "/api",
            "/api/v1/...",
            "/api/v1/users",
            "/apiary",
            "/shop/...",
            "/shop/cart/...",
            "/s",
            "/é/...",
        ]
        .iter()
        .map(|text| route(text))
        .collect();
        let table = RouteTable::new(routes.iter().map(|route| (route.clone(), route.clone())));
        assert_eq!(table.len(), routes.len());
        for path in [
            "/",
            "/api",
            "/api/",
            "/api/v1",
            "/api/v1/",
            "/api/v1/users",
            "/api/v1/users/7",
            "/api/v2/x",
            "/apiary",
            "/apiary/x",
            "/apix",
            "/shop",
            "/shop/cart",
            "/shop/cartography",
            "/shop/cart/1/2",
            "/s",
            "/s/x",
            "/é",
            "/é/x",
            "/éa",
            "",
        ] {
            assert_eq!(
                table.find(path).map(Route::as_str),
                scanned(&routes, path).map(Route::as_str),
                "path {path:?}"
            );
        }
    }

    #[test]
    fn routes_added_and_taken_out_one_by_one_find_what_a_new_table_finds() {
        let routes: Vec<Route> = ["/a/...", "/b/...", "/ab/...", "/a", "/a/b/...", "/..."]
            .iter()
            .map(|text| route(text))
            .collect();
        let mut table = RouteTable::default();
        for route in &routes {
            table.insert(route, route.clone());
        }
        // An equal route of another holder neither replaces nor goes with the first.
        table.insert(&routes[0], route("/other/..."));
        table.remove_if(&routes[0], |value| value.as_str() == "/other/...");
        for gone in 0..=routes.len() {
            let left = &routes[gone..];
            let rebuilt = RouteTable::new(left.iter().map(|route| (route.clone(), route.clone())));
            assert_eq!(table.len(), left.len());
            assert_eq!(table.prefix_lengths, rebuilt.prefix_lengths, "{left:?}");
            for path in ["/", "/a", "/a/b", "/a/b/c", "/ab/c", "/b/c", "/c"] {
                assert_eq!(table.find(path), rebuilt.find(path), "{path} with {left:?}");
            }
            if let Some(route) = routes.get(gone) {
                table.remove_if(route, |value| value == route);
            }
        }
        assert!(table.is_empty());
    }

    #[test]
    fn without_a_catch_all_an_unrouted_path_finds_nothing() {
        let table = RouteTable::new([(route("/a/..."), 1), (route("/b"), 2)]);
        assert_eq!(table.find("/b"), Some(&2));
        assert_eq!(table.find("/a/b"), Some(&1));
        assert_eq!(table.find("/c"), None);
        assert_eq!(table.find("/ab"), None);
        assert!(RouteTable::<u8>::new([]).find("/").is_none());
    }

    #[test]
    fn a_lookup_costs_one_probe_per_prefix_length_whatever_the_path_or_the_routes() {
        // Thousands of routes, of a few prefix lengths, and a path of thousands of
        // segments: the lookup probes at most once per distinct prefix length.
        let mut routes = Vec::new();
        for i in 0..5000 {
            routes.push((route(&format!("/t{i:04}/...")), i));
            routes.push((route(&format!("/t{i:04}/exact")), i));
        }
        routes.push((route("/t0000/deeper/..."), 0));
        let table = RouteTable::new(routes);
        let lengths = table.prefix_lengths.len();
        assert_eq!(lengths, 2, "{:?}", table.prefix_lengths);
        let path = format!("/nowhere{}", "/x".repeat(5000));
        let (found, probes) = table.find_counting(&path);
        assert_eq!(found, None);
        assert!(probes <= lengths, "{probes} probes");
        let (found, probes) = table.find_counting("/t4999/deeper/a/b/c");
        assert_eq!(found, Some(&4999));
        assert!(probes <= lengths, "{probes} probes");
    }
}
