# flyball-nats:dev: nats-server built from the version pinned in
# services/go.mod, with flyball's configs, and the flyball binary so that the
# shell-less image can still healthcheck itself:
#   /flyball healthcheck http://localhost:8222/healthz
#
# `make images` stages bin/nats-server, bin/flyball and deploy/compose/nats/
# with this file and runs `DOCKER_BUILDKIT=0 docker build`. Nothing is pulled.
#
# With registry access you can use the official image instead; see
# "Using the official nats image" in README.md.
FROM scratch

COPY nats-server /nats-server
COPY flyball /flyball
COPY nats/ /etc/nats/
# JetStream store. A named volume mounted here inherits this ownership.
COPY --chown=65534:65534 data/ /data/

USER 65534:65534
ENV NATS_SERVER_NAME=nats
EXPOSE 4222 6222 8222
HEALTHCHECK --interval=3s --timeout=3s --retries=3 \
  CMD ["/flyball", "healthcheck", "http://localhost:8222/healthz"]
ENTRYPOINT ["/nats-server"]
CMD ["-c", "/etc/nats/single.conf"]
