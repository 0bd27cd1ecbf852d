# masklab dashboard + training engine.
#   docker build -t masklab .
#   docker build --build-arg TORCH_INDEX=<a CPU-only torch wheel index> -t masklab .   (smaller image)
#   docker run -p 8501:8501 -v masklab-workspace:/workspace masklab
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

COPY engine ./engine
COPY app ./app
COPY pages ./pages
COPY configs ./configs
COPY .streamlit ./.streamlit

RUN useradd --create-home --uid 1000 masklab \
 && mkdir -p /workspace && chown masklab:masklab /workspace
USER masklab
VOLUME ["/workspace"]
EXPOSE 8501
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
  CMD curl -fsS http://127.0.0.1:8501/_stcore/health || exit 1

CMD ["python", "-m", "streamlit", "run", "app/streamlit_app.py", "--server.headless", "true", \
     "--server.address", "0.0.0.0", "--server.port", "8501", "--browser.gatherUsageStats", "false"]
