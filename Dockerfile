# edit-server http as a container (docs/DEPLOY.md).
#
# CPU image (default):   docker build -t edit-server .
# GPU image (CUDA):      docker build -t edit-server:cuda --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu128 .
#                        docker run --gpus all -p 8765:8765 edit-server:cuda --model default --device cuda
# Run:                   docker run -p 8765:8765 -v $PWD/config.json:/etc/edit-server/config.json:ro edit-server
#
# The shipped default model (SmolLM2-135M base + the block-diffusion adapter in engine/weights/) is baked
# in at build time, so the container needs no network at run time. Hub models (--model ORG/NAME) download
# into /models (mount a volume there to keep them).
FROM python:3.11-slim

ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    XDG_CACHE_HOME=/cache \
    HF_HOME=/models

# git: the context builder's co-change source (gitpython); never run on the HTTP path
RUN apt-get update && apt-get install -y --no-install-recommends git && rm -rf /var/lib/apt/lists/*

WORKDIR /app
# torch first, from the chosen index: a bare `torch` requirement would pull the multi-GB CUDA build
RUN pip install "torch==${TORCH_VERSION}" --index-url "${TORCH_INDEX}"
COPY pyproject.toml README.md LICENSE ./
COPY edit_server ./edit_server
COPY engine ./engine
COPY evals ./evals
RUN pip install . \
 && python -c "from engine.loading.base import fetch_base; print(fetch_base())" \
 && useradd --create-home --uid 10001 edit \
 && mkdir -p /models /etc/edit-server \
 && printf '{}\n' > /etc/edit-server/config.json \
 && chown -R edit /models /cache

USER edit
EXPOSE 8765
HEALTHCHECK --interval=30s --timeout=5s --start-period=120s \
  CMD python -c "import sys, urllib.request; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8765/ready', timeout=4).status == 200 else 1)"
# Other hosts reach the server only under the names listed in http.allowedHosts (config.json), and only
# with a key when http.apiKeys / http.apiKeyFile are set (see docs/DEPLOY.md).
ENTRYPOINT ["edit-server", "http", "--host", "0.0.0.0", "--port", "8765", "--config", "/etc/edit-server/config.json", "--log-level", "INFO"]
CMD ["--model", "default", "--device", "cpu"]
