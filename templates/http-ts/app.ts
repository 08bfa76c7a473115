// An HTTP function in TypeScript: `GET /{{name}}?name=you` answers `Hello, you!`.
import { config } from "./faas.js";
import { http, Request, Response } from "./faas-http.js";

export const incomingHandler = http((request: Request): Response => {
  const greeting: string = config("greeting") ?? "Hello";
  const name: string = request.query.get("name") ?? "world";
  return new Response(200, `${greeting}, ${name}!\n`);
});
