# DP Portal image: the web server (gunicorn + whitenoise) and the Celery worker share it.
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
COPY requirements.txt .
RUN pip install --no-cache-dir -r requirements.txt
COPY . .
RUN DJANGO_SECRET_KEY=build-only-collectstatic-key-not-used-at-runtime-000 \
    python manage.py collectstatic --no-input
RUN useradd --create-home --uid 1000 portal && mkdir -p /data && chown portal /data
USER portal
EXPOSE 8000
CMD ["gunicorn", "dpportal.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "3"]
