// An HTTP function: `GET /{{name}}?name=you` answers `Hello, you!`.
import { config } from "./faas.js";
import { http, Response } from "./faas-http.js";

export const incomingHandler = http((request) => {
  const greeting = config("greeting") ?? "Hello";
  const name = request.query.get("name") ?? "world";
  return new Response(200, `${greeting}, ${name}!\n`);
});
