# Multi-stage build on Debian 12: the build stage compiles ratewall; the runtime stage holds
# only the binary, its shared libraries and the default configuration.
FROM debian:12 AS build
RUN apt-get update && apt-get install -y --no-install-recommends \
      g++ cmake ninja-build pkg-config libboost1.81-dev libyaml-cpp-dev nlohmann-json3-dev \
      libhiredis-dev libssl-dev \
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
      libyaml-cpp0.7 libhiredis0.14 libssl3 ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --no-create-home --shell /usr/sbin/nologin ratewall
COPY --from=build /src/build/ratewall /usr/local/bin/ratewall
COPY config/ratewall.yaml /etc/ratewall/ratewall.yaml
USER ratewall
EXPOSE 8080 9090
ENTRYPOINT ["/usr/local/bin/ratewall"]
CMD ["--config", "/etc/ratewall/ratewall.yaml"]
