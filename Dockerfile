# Temper's image for the production topology (docker-compose.yml): web, workers and beat.
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    DJANGO_SETTINGS_MODULE=controlplane.settings TEMPER_VAR_DIR=/var/lib/temper

RUN apt-get update \
 && apt-get install -y --no-install-recommends bubblewrap build-essential libpq5 \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY requirements.txt .
RUN pip install -r requirements.txt \
 && pip install --no-deps --force-reinstall "django-ninja==1.7.1" \
 && (pip uninstall -y torchvision torchaudio torchcodec || true)

COPY . .
RUN useradd --system --home /var/lib/temper temper && mkdir -p /var/lib/temper && chown temper /var/lib/temper \
 && SECRET_KEY=build python manage.py collectstatic --noinput -v0
USER temper
EXPOSE 8000
CMD ["uvicorn", "controlplane.asgi:application", "--host", "0.0.0.0", "--port", "8000", "--lifespan", "off", "--no-access-log", "--ws-max-size", "65536"]
