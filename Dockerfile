# Production-like image for web (daphne), worker and beat; see docker-compose.yml.
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
COPY requirements.txt .
RUN pip install --no-cache-dir -r requirements.txt && pip check
COPY . .
RUN DEBUG=1 python manage.py collectstatic --noinput
RUN useradd --create-home portal
USER portal
EXPOSE 8000
CMD ["daphne", "-b", "0.0.0.0", "-p", "8000", "portal.asgi:application"]
