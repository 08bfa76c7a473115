//! Bearer-token checks for the admin API.

use http::HeaderMap;
use http::header::AUTHORIZATION;

/// Whether `headers` carry `Authorization: Bearer <token>`.
pub(crate) fn is_authorized(headers: &HeaderMap, token: &str) -> bool {
    let Some(presented) = headers
        .get(AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
    else {
        return false;
    };
    constant_time_eq(presented.trim().as_bytes(), token.as_bytes())
}

/// Compares without stopping at the first difference, so response timing does not
/// reveal how much of a guessed token was right.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(AUTHORIZATION, HeaderValue::from_str(value).unwrap());
        headers
    }

    #[test]
    fn only_the_exact_bearer_token_is_accepted() {
        assert!(is_authorized(&headers("Bearer s3cret"), "s3cret"));
        assert!(!is_authorized(&headers("Bearer s3cre"), "s3cret"));
        assert!(!is_authorized(&headers("Bearer s3cretX"), "s3cret"));
        assert!(!is_authorized(&headers("Basic s3cret"), "s3cret"));
        assert!(!is_authorized(&HeaderMap::new(), "s3cret"));
    }
}
