# Leasehold: multi-stage build; the runtime image carries redis-server so `docker run` works
# with the embedded default (a private Redis with AOF in /var/lib/leasehold/data). It listens
# on 0.0.0.0, so callers need API keys (make the first with the admin token generated into
# the data dir, see the README's Docker section) unless LEASEHOLD_ALLOW_ANONYMOUS=true.
FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY crates crates
COPY src src
COPY lua lua
COPY templates templates
COPY static static
RUN cargo build --release --locked

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends redis-server \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --create-home --home-dir /var/lib/leasehold leasehold \
 && install -d -m 0700 -o leasehold /var/lib/leasehold/data
COPY --from=build /src/target/release/leasehold /usr/local/bin/leasehold
USER leasehold
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
