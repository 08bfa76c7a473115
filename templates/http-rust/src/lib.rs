//! An HTTP function: `GET /{{name}}?name=you` answers `Hello, you!`.

use faas_sdk::http::{Request, Response};

#[faas_sdk::http]
fn handle(req: Request) -> Response {
    let greeting = faas_sdk::config::get("greeting").unwrap_or_else(|| "Hello".to_owned());
    let name = req.query_param("name").unwrap_or("world");
    Response::text(200, format!("{greeting}, {name}!\n"))
}
