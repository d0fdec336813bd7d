# The platform image: web, workers, beat and the sandbox host all run from it (docker-compose.yml).
FROM python:3.11-slim-bookworm
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 DEBIAN_FRONTEND=noninteractive
# The sandbox host's desktops and browsers: X server, VNC, window manager, apps, confinement, adb.
RUN apt-get update && apt-get install -y --no-install-recommends nodejs npm curl \
        xvfb x11vnc openbox xterm mousepad pcmanfm chromium bubblewrap xdotool x11-utils dbus-x11 \
        at-spi2-core python3-pyatspi fonts-dejavu-core adb \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY pyproject.toml package.json package-lock.json ./
COPY webapp webapp
COPY agent_core agent_core
COPY sandbox_workers sandbox_workers
RUN pip install . && npm ci --no-audit --no-fund --loglevel=error \
    && mkdir -p static/vendor && cp node_modules/htmx.org/dist/htmx.min.js static/vendor/
COPY . .
RUN SECRET_KEY=build-only-collectstatic-key-0123456789abcdef python manage.py collectstatic --no-input -v0
RUN useradd --create-home flywheel && mkdir -p /data && chown flywheel /data
USER flywheel
ENV FLYWHEEL_VAR_DIR=/data MEDIA_ROOT=/data/media
EXPOSE 8000
CMD ["daphne", "-b", "0.0.0.0", "-p", "8000", "--websocket_connect_timeout", "30", "webapp.asgi:application"]
