//! Log lines that the worker tags with the tenant, workflow and function.

use crate::bindings::faas::platform::log::{Level, log};

/// Logs `message` at debug level.
pub fn debug(message: &str) {
    log(Level::Debug, message);
}

/// Logs `message` at info level.
pub fn info(message: &str) {
    log(Level::Info, message);
}

/// Logs `message` at warn level.
pub fn warn(message: &str) {
    log(Level::Warn, message);
}

/// Logs `message` at error level.
pub fn error(message: &str) {
    log(Level::Error, message);
}
