// The JavaScript hello of bench/sizes.sh: a plain wasi:http component (no platform
// imports, so `wasmtime serve` runs it too) answering `Hello from JavaScript!`.
import { Fields, OutgoingBody, OutgoingResponse, ResponseOutparam } from "wasi:http/types@0.2.12";

const hello = new TextEncoder().encode("Hello from JavaScript!\n");

export const incomingHandler = {
  handle(request, responseOut) {
    const response = new OutgoingResponse(new Fields());
    response.setStatusCode(200);
    const body = response.body();
    ResponseOutparam.set(responseOut, { tag: "ok", val: response });
    const stream = body.write();
    stream.blockingWriteAndFlush(hello);
    stream[Symbol.dispose]();
    OutgoingBody.finish(body, undefined);
  },
};
