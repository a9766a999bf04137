# Multi-stage build on Debian 12: the build stage compiles ratewall; the runtime stage holds
# only the binary, its shared libraries and config/examples/docker.yaml. The README's
# "Docker" section documents this file; tests/packaging/docker_test.sh checks that it still
# says what the README says (no Docker daemon needed).
FROM debian:12 AS build
RUN apt-get update && apt-get install -y --no-install-recommends \
      g++ cmake ninja-build pkg-config libboost1.81-dev libyaml-cpp-dev nlohmann-json3-dev \
      libhiredis-dev libssl-dev libnghttp2-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY CMakeLists.txt ./
COPY include include
COPY src src
COPY tests tests
COPY tools tools
RUN cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DRATEWALL_TESTS=OFF \
      -DRATEWALL_BENCH=OFF \
    && cmake --build build -j2 --target ratewall \
    && strip build/ratewall

FROM debian:12-slim
RUN apt-get update && apt-get install -y --no-install-recommends \
      libyaml-cpp0.7 libhiredis0.14 libssl3 libnghttp2-14 ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --no-create-home --shell /usr/sbin/nologin ratewall \
    && install -d -o ratewall -g ratewall -m 0700 /var/lib/ratewall
COPY --from=build /src/build/ratewall /usr/local/bin/ratewall
COPY config/examples/docker.yaml /etc/ratewall/ratewall.yaml
# Run-time API keys (/admin/keys) are kept here; mount a volume to keep them across containers.
ENV STATE_DIRECTORY=/var/lib/ratewall
USER ratewall
# 8080: the proxy. 9090: the admin API, on every interface only when RATEWALL_ADMIN_TOKEN is
# set (otherwise on the container's loopback, which the health check below still reaches).
EXPOSE 8080 9090
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
  CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/9090 && printf 'GET /healthz HTTP/1.0\\r\\n\\r\\n' >&3 && head -n1 <&3 | grep -q ' 200 '"]
ENTRYPOINT ["/usr/local/bin/ratewall"]
CMD ["--config", "/etc/ratewall/ratewall.yaml"]
