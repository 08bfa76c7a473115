# syntax=docker/dockerfile:1
# The worker image: `faas` with the worker (Wasmtime, Cranelift), run by the chart as
# `faas worker ...`. It compiles the components placed on it into the data dir.
#
#   docker build -f docker/worker.Dockerfile -t faas-worker:0.1.0 .

ARG RUST_VERSION=1.95.0

FROM docker.io/library/rust:${RUST_VERSION}-slim-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p faas-cli \
 && cp target/release/faas /usr/local/bin/faas

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /usr/local/bin/faas /usr/local/bin/faas
USER 65532:65532
# Compiled components (the AOT cache) and the worker socket, in a dir faas creates
# owner-only inside the chart's emptyDir at /var/lib/faas.
ENV FAAS_DATA_DIR=/var/lib/faas/data
EXPOSE 8081 9090
ENTRYPOINT ["/usr/local/bin/faas"]
CMD ["worker", "--listen", "0.0.0.0:8081"]
