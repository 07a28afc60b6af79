# DP Portal image: the web server (gunicorn + whitenoise) and the Celery worker share it.
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
# Login-failure counters must be shared by the web processes (CMD starts 3): a Redis cache,
# by default the `redis` service of docker-compose.yml. Override it for another Redis; password
# checks are refused (HTTP 503) while it cannot be reached (valid API tokens still work).
ENV DPPORTAL_CACHE_URL=redis://redis:6379/1
WORKDIR /app
# pango, HarfBuzz and a font for report.pdf (WeasyPrint): the same list run.sh and test.sh use
COPY scripts/common.sh scripts/
RUN bash -c 'source scripts/common.sh && ensure_pdf_libraries && pdf_libraries_present' \
    && rm -rf /var/lib/apt/lists/*
COPY requirements.txt requirements-spark.txt ./
RUN pip install --no-cache-dir -r requirements.txt
# The optional `spark` counting engine's client (docker compose --profile spark; docs/scale.md)
ARG DPPORTAL_WITH_SPARK=0
RUN if [ "$DPPORTAL_WITH_SPARK" = 1 ]; then pip install --no-cache-dir -r requirements-spark.txt; fi
COPY . .
RUN DJANGO_SECRET_KEY=build-only-collectstatic-key-not-used-at-runtime-000 \
    python manage.py collectstatic --no-input
RUN useradd --create-home --uid 1000 portal && mkdir -p /data && chown portal /data
USER portal
EXPOSE 8000
# Threads, so that a request waiting on the database does not hold a whole process: /healthz
# under 50 users, benchmarks/healthz_latency.py (as docker-compose.yml runs it).
CMD ["gunicorn", "dpportal.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "3", "--threads", "4", "--worker-class", "gthread"]
