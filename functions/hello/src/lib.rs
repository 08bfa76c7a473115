//! The hello-world HTTP function: `GET /hello?name=you` answers `Hello, you!`.
//! The greeting comes from the function's config (`greeting`), so redeploying with a
//! new config is visible.

use faas_sdk::http::{Request, Response};

#[faas_sdk::http]
fn handle(req: Request) -> Response {
    let greeting = faas_sdk::config::get("greeting").unwrap_or_else(|| "Hello".to_owned());
    let name = req.query_param("name").unwrap_or("world");
    // Shows up in `faas logs hello`.
    println!("greeting {name}");
    Response::text(200, format!("{greeting}, {name}!\n"))
}
