# syntax=docker/dockerfile:1
# The gateway and operator image: `faas` built without the worker (cargo feature
# `worker` off), so it carries no Wasmtime and no compiler. The chart runs it as
# `faas gateway --kubernetes ...` and `faas operator ...`.
#
#   docker build -f docker/gateway.Dockerfile -t faas-gateway:0.1.0 .
#
# (from the repository root: the whole workspace is the build context, less what
# .dockerignore leaves out.)

ARG RUST_VERSION=1.95.0

FROM docker.io/library/rust:${RUST_VERSION}-slim-bookworm AS build
WORKDIR /src
COPY . .
# The caches make a rebuild after a source change recompile only the workspace.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p faas-cli --no-default-features \
 && cp target/release/faas /usr/local/bin/faas

# glibc and libgcc, nothing else: no shell, no package manager; uid 65532 (nonroot).
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /usr/local/bin/faas /usr/local/bin/faas
USER 65532:65532
# The chart mounts an emptyDir at /var/lib/faas (the root filesystem is read-only);
# the data dir is one faas creates inside it owner-only, as it must be.
ENV FAAS_DATA_DIR=/var/lib/faas/data
EXPOSE 3000
ENTRYPOINT ["/usr/local/bin/faas"]
CMD ["gateway", "--listen", "0.0.0.0:3000"]
