//! The function's configuration: the `config` table of its entry in workflow.toml.

use crate::bindings::faas::platform::config as wit;

/// The value of `key` in the function's config table, if set.
pub fn get(key: &str) -> Option<String> {
    wit::get(key)
}
