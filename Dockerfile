# Leasehold: multi-stage build; the runtime image (Debian slim) carries redis-server so
# `docker run` works with the embedded default (a private Redis with AOF in
# /var/lib/leasehold/data); on Kubernetes (deploy/kubernetes) it talks to a Redis elsewhere.
# It listens on 0.0.0.0, so callers need API keys (make the first with the admin token
# generated into the data dir, see docs/book/src/operating/container.md) unless
# LEASEHOLD_ALLOW_ANONYMOUS=true. The user is uid 65532, as the Kubernetes manifests ask.
FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY crates crates
COPY src src
COPY lua lua
COPY templates templates
COPY static static
# The release profile keeps line tables (the benchmarks' profiles read them); the image needs
# none: stripped, the binary is about a quarter of its size (BENCHMARKS.md, "The image").
RUN cargo build --release --locked \
 && objcopy --strip-all target/release/leasehold target/release/leasehold.stripped

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends redis-server \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 65532 --user-group --create-home --home-dir /var/lib/leasehold leasehold \
 && install -d -m 0700 -o leasehold /var/lib/leasehold/data
COPY --from=build /src/target/release/leasehold.stripped /usr/local/bin/leasehold
USER 65532:65532
WORKDIR /var/lib/leasehold
ENV LEASEHOLD_LISTEN=0.0.0.0:8080 \
    LEASEHOLD_DATA_DIR=/var/lib/leasehold/data
VOLUME ["/var/lib/leasehold/data"]
EXPOSE 8080
STOPSIGNAL SIGTERM
# The image has no curl: the binary checks itself.
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s CMD ["leasehold", "healthcheck"]
ENTRYPOINT ["leasehold"]
CMD ["serve"]
