# gpugate webhook image. Build: docker build -t gpugate:0.1.0 .
# Stage 1 builds a wheel and installs it with its runtime dependencies into a virtualenv;
# stage 2 copies only that virtualenv (no compilers, no pip cache, no tests) and runs as non-root.

FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN python -m venv /opt/gpugate
COPY pyproject.toml README.md constraints.txt ./
COPY gpugate/ gpugate/
COPY policies/ policies/
COPY lint/ lint/
COPY webhook/ webhook/
COPY audit/ audit/
# A regular (non-editable) install of the project's runtime dependencies only: no [test] or [dev] extras,
# at the exact versions of constraints.txt (the ones the test suite ran with).
RUN /opt/gpugate/bin/pip install -c constraints.txt . \
 && /opt/gpugate/bin/pip uninstall --yes pip setuptools wheel \
 && /opt/gpugate/bin/python -m compileall -q /opt/gpugate

FROM python:3.11-slim AS runtime
# 65532: the conventional "nonroot" uid; matches runAsUser in deploy/base/deployment.yaml.
RUN groupadd --system --gid 65532 gpugate \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
    --shell /usr/sbin/nologin gpugate
COPY --from=build /opt/gpugate /opt/gpugate
ENV PATH=/opt/gpugate/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 65532:65532
EXPOSE 8443 9090
ENTRYPOINT ["gpugate"]
CMD ["serve", "--host=0.0.0.0", "--port=8443", "--config=/etc/gpugate/policy/policy.yaml", "--tls-cert=/etc/gpugate/tls/tls.crt", "--tls-key=/etc/gpugate/tls/tls.key"]
