# flyball:dev: every flyball service, the CLI and the demo target, one binary.
#
# `make images` builds bin/flyball (CGO_ENABLED=0, static, tzdata embedded),
# stages it with this file in a temporary build context and runs
# `DOCKER_BUILDKIT=0 docker build`. FROM scratch pulls nothing, and there is no
# `# syntax=` line and no BuildKit-only instruction, so the legacy builder and
# docker-compose v1 handle it. There is no shell in the image: healthchecks
# run `/flyball healthcheck <url>`.
FROM scratch

# CA roots for HTTPS targets, copied from the build host (empty if it has none).
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY flyball /flyball
# Example task specs: `flyball task create -f /examples/demo-task.json`.
COPY examples/ /examples/

USER 65534:65534
EXPOSE 8080 9090
HEALTHCHECK --interval=5s --timeout=3s --retries=3 \
  CMD ["/flyball", "healthcheck", "http://localhost:9090/healthz"]
ENTRYPOINT ["/flyball"]
CMD ["--help"]
