# CPU image of the state-rank dashboard: `docker build -t state-rank . && docker run -p 8501:8501 state-rank`
# (For NVIDIA GPUs see Dockerfile.cuda.) Not buildable on the development machines (no Docker engine).
FROM python:3.11-slim

ENV PIP_NO_CACHE_DIR=1 PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 NUMBA_CACHE_DIR=/tmp/numba-cache \
    HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
WORKDIR /app

# torch first, pinned, from the CPU index: otherwise pip resolves the multi-GB CUDA build.
RUN pip install --index-url https://download.pytorch.org/whl/cpu torch==2.13.0
COPY requirements.txt .
RUN pip install -r requirements.txt

RUN useradd --create-home --uid 1000 app
COPY --chown=app:app . .
USER app

EXPOSE 8501
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s \
    CMD python -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://localhost:8501/_stcore/health').read()==b'ok' else 1)"
# 0.0.0.0 inside the container: the port is reachable only where `docker run -p` publishes it
# (`-p 127.0.0.1:8501:8501` keeps it on the host; the dashboard has no authentication).
CMD ["python", "-m", "ui.shared.launch", "--server.headless", "true", "--server.fileWatcherType", "none", \
     "--server.address", "0.0.0.0", "--server.port", "8501"]
