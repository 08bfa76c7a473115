//! A counter kept in the tenant's key-value store. The counter's name is the last
//! segment of the path, whatever route leads here:
//!
//! - `POST /counter/<name>` adds 1 (or the body's integer) and returns the new value;
//! - `GET /counter/<name>` returns the current value;
//! - `DELETE /counter/<name>` removes it.

use faas_sdk::http::{Request, Response};
use faas_sdk::key_value;

#[faas_sdk::http]
fn handle(req: Request) -> Result<Response, key_value::Error> {
    let name = req.path().rsplit('/').next().unwrap_or_default();
    if name.is_empty() || name == "counter" {
        return Ok(Response::text(400, "usage: /counter/<name>\n"));
    }
    let key = format!("counter:{name}");
    match req.method() {
        "POST" => {
            let body = String::from_utf8_lossy(req.body());
            let delta = match body.trim() {
                "" => 1,
                text => match text.parse::<i64>() {
                    Ok(delta) => delta,
                    Err(_) => return Ok(Response::text(400, "body must be an integer\n")),
                },
            };
            let value = key_value::increment(&key, delta)?;
            Ok(Response::text(200, format!("{value}\n")))
        }
        "GET" => {
            let value = key_value::get(&key)?
                .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
                .unwrap_or_else(|| "0".to_owned());
            Ok(Response::text(200, format!("{value}\n")))
        }
        "DELETE" => {
            key_value::delete(&key)?;
            Ok(Response::new(204))
        }
        _ => Ok(Response::text(405, "use GET, POST or DELETE\n")),
    }
}
