# syntax=docker/dockerfile:1
# gpu-bottleneck-exporter: one small glibc image (a static musl binary cannot dlopen the
# driver's libnvidia-ml.so.1, which the NVIDIA container runtime mounts at run time).

FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --package gpu-bottleneck-exporter \
    && cp target/release/gpu-bottleneck-exporter /usr/local/bin/

FROM debian:bookworm-slim
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="gpu-bottleneck-exporter" \
      org.opencontainers.image.description="Prometheus exporter that tells why a GPU waits: data I/O, CPU preprocessing, host-bound loops, sync stalls, throttling and more" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
# The NVIDIA runtime reads these: expose every GPU, with the NVML (utility) capability only.
ENV NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=utility
COPY --from=build /usr/local/bin/gpu-bottleneck-exporter /usr/local/bin/gpu-bottleneck-exporter
USER 65534:65534
EXPOSE 9842
ENTRYPOINT ["/usr/local/bin/gpu-bottleneck-exporter"]
# In a DaemonSet, mount the host's /proc and /sys read-only at these paths (deploy/kubernetes).
CMD ["serve", "--path.procfs=/host/proc", "--path.sysfs=/host/sys"]
