# masklab dashboard + training engine.
#   docker build -t masklab .
#   docker build --build-arg TORCH_INDEX=<a CPU-only torch wheel index> -t masklab .   (smaller image)
# This machine only (published on the host's 127.0.0.1; inside the container the app must bind 0.0.0.0,
# so the no-sign-in opt-out is given explicitly):
#   docker run --read-only --tmpfs /tmp -p 127.0.0.1:8501:8501 -e MASKLAB_ALLOW_NO_SIGNIN=1 \
#     -v masklab-workspace:/workspace masklab
# Wider, with sign-in (README "Sign-in and roles"): add a user, then publish without the opt-out:
#   docker run --rm -i -v masklab-workspace:/workspace masklab python -m engine users add alice --role admin --password-stdin
#   docker run --read-only --tmpfs /tmp -p 8501:8501 -v masklab-workspace:/workspace masklab
# The image refuses to serve without sign-in unless MASKLAB_ALLOW_NO_SIGNIN=1 (app/serve.py).
FROM python:3.11-slim-bookworm

ARG TORCH_INDEX=""
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    MASKLAB_WORKSPACE=/workspace

# Bundled sample data from Debian (Fashion-MNIST, MIT licence); curl for the health check.
RUN apt-get update \
 && apt-get install -y --no-install-recommends dataset-fashion-mnist fortunes asterisk-core-sounds-en-wav curl \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/masklab
COPY requirements.txt .
RUN if [ -n "$TORCH_INDEX" ]; then \
      pip install --index-url "$TORCH_INDEX" torch==2.11.0 torchvision==0.26.0 torchaudio==2.11.0 ; \
    fi \
 && pip install -r requirements.txt

# The code stays owned by root (read-only for the app); the workspace is the only folder it writes
# (plus /tmp for uploads being inspected: a tmpfs with --read-only).
COPY engine ./engine
COPY app ./app
COPY pages ./pages
COPY configs ./configs
COPY .streamlit/config.toml ./.streamlit/config.toml

RUN useradd --no-create-home --home-dir /workspace --shell /usr/sbin/nologin --uid 10001 masklab \
 && mkdir -p /workspace && chown masklab:masklab /workspace
ENV HOME=/workspace
USER 10001:10001
VOLUME ["/workspace"]
EXPOSE 8501
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
  CMD curl -fsS http://127.0.0.1:8501/_stcore/health || exit 1

# app.serve refuses 0.0.0.0 until sign-in is configured (or MASKLAB_ALLOW_NO_SIGNIN=1 / a demo's
# MASKLAB_PUBLIC_DEMO=1), then runs streamlit with XSRF protection and the upload cap.
CMD ["python", "-m", "app.serve", "--address", "0.0.0.0", "--port", "8501"]
