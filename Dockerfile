# Temper's image for the production topology (docker-compose.yml): web, workers and beat.
# Builds with the classic builder (`docker build`, Docker 20.10+) as well as with BuildKit.
#
#   docker build -t temper:latest .                                   # CPU hosts (requirements/lock/runtime.txt)
#   docker build -t temper:gpu --build-arg REQUIREMENTS=requirements/lock/gpu.txt \
#       --build-arg RUNTIME_PACKAGES="gcc libc6-dev python3-dev" .    # CUDA hosts (compose profile gpu)
#
# Two stages: `builder` has the compilers and installs the Python packages into /opt/venv;
# the final stage copies that environment onto the same base with only what the runtime needs
# (Debian's python3, bubblewrap for the sandboxes) and runs as the user `temper`. Both stages use
# Debian's python3, which is also the interpreter the bubblewrap sandboxes run (/usr/bin/python3).
#
# Build arguments:
#   BASE_IMAGE        Debian bookworm (or a derivative with python3 3.11). A CUDA base is not
#                     needed for GPUs: PyPI's torch and vllm wheels carry their CUDA libraries,
#                     and the NVIDIA container runtime brings the driver.
#   REQUIREMENTS      the lock file to install (requirements/lock.py): requirements/lock/runtime.txt
#                     (CPU) or requirements/lock/gpu.txt. Every package at its locked version and
#                     every file checked against its locked sha256 (pip --require-hashes).
#   RUNTIME_PACKAGES  extra Debian packages of the final stage. The GPU build needs a C compiler
#                     and Python's headers at run time: Triton (torch.compile, vLLM) compiles its
#                     launcher on first use.
#   PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, PIP_FIND_LINKS, PIP_NO_INDEX, PIP_TRUSTED_HOST
#                     pip's own settings, for a build behind a mirror or from a wheelhouse; unset
#                     by default (PyPI, and PyTorch's CPU index named in the CPU lock files).
ARG BASE_IMAGE=debian:bookworm-slim

FROM ${BASE_IMAGE} AS builder
ARG REQUIREMENTS=requirements/lock/runtime.txt
ARG PIP_INDEX_URL
ARG PIP_EXTRA_INDEX_URL
ARG PIP_FIND_LINKS
ARG PIP_NO_INDEX
ARG PIP_TRUSTED_HOST
ENV DEBIAN_FRONTEND=noninteractive PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential python3 python3-dev python3-venv ca-certificates \
 && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
COPY requirements.txt /src/requirements.txt
COPY requirements /src/requirements
WORKDIR /src
# Everything from the lock files, without resolving anything (--no-deps: the lock is the whole set).
# vLLM and DeepSpeed (GPU lock) pull in the `ninja` build tool, whose Python package has the import
# name of django-ninja and overwrites it: django-ninja is installed again from its locked entry. The
# GPU build adds DeepSpeed (requirements/lock/deepspeed.txt: built against the torch just installed).
RUN pip install --no-deps --require-hashes -r "$REQUIREMENTS" -r requirements/lock/nodeps.txt \
 && if [ "$REQUIREMENTS" = requirements/lock/gpu.txt ]; then \
      DS_BUILD_OPS=0 pip install --no-deps --require-hashes --no-build-isolation -r requirements/lock/deepspeed.txt; fi \
 && if pip show -q ninja 2>/dev/null; then \
      python requirements/lock.py pick "$REQUIREMENTS" django-ninja > /tmp/django-ninja.lock \
      && pip install --no-deps --require-hashes --force-reinstall -r /tmp/django-ninja.lock; fi \
 && find /opt/venv -depth -name __pycache__ -type d -exec rm -rf {} +
# The packages sandboxed programs may import (requirements/sandbox.txt: the CAD domains' numpy and
# manifold3d), for the sandbox's interpreter (this python3), copied to /usr/local/lib/temper-sandbox
# below; the marker says which set it is (workers/sandbox/libs.py).
RUN pip install --no-deps --only-binary=:all: --target /opt/temper-sandbox -r requirements/sandbox.txt \
 && cp requirements/sandbox.txt /opt/temper-sandbox/.temper-requirements

FROM ${BASE_IMAGE} AS runtime
# git and python3-pytest: the shell sessions' programs (with bash), which the bubblewrap sandboxes
# take from this image's /usr (workers/sandbox/session.py)
ARG RUNTIME_PACKAGES=
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 bubblewrap ca-certificates default-jre-headless git python3-pytest $RUNTIME_PACKAGES \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /var/lib/temper --shell /usr/sbin/nologin temper \
 && mkdir -p /var/lib/temper && chown temper:temper /var/lib/temper
COPY --from=builder /opt/venv /opt/venv
COPY --from=builder /opt/temper-sandbox /usr/local/lib/temper-sandbox
ENV PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 \
    DJANGO_SETTINGS_MODULE=controlplane.settings TEMPER_VAR_DIR=/var/lib/temper
WORKDIR /app
COPY . .
# plotly.js's basic bundle: taken from the build context when `make install` fetched it there, else
# fetched now; a build that cannot reach the registry serves the plotly package's full bundle.
RUN python -m controlplane.web.vendor fetch --optional \
 && SECRET_KEY=build python manage.py collectstatic --noinput -v0
USER temper
EXPOSE 8000
ENTRYPOINT ["/app/deploy/entrypoint.sh"]
CMD ["uvicorn", "controlplane.asgi:application", "--host", "0.0.0.0", "--port", "8000", "--lifespan", "off", "--no-access-log", "--ws-max-size", "65536"]
