# The image of web, worker, beat and migrate (docker-compose.yml; docs/deploy.md).
# Production requirements only (requirements-prod.txt: no test tools, no embedded dev
# servers). Its default command is the web server exactly as compose runs it.
FROM python:3.11.11-slim-bookworm
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
COPY requirements-prod.txt .
# python-ldap (LDAP sign-in, docs/deploy.md "Identity") builds from source: a compiler and
# the LDAP/SASL headers for the build only; the libraries themselves stay.
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev libldap2-dev libsasl2-dev \
    && pip install --no-cache-dir -r requirements-prod.txt && pip check \
    && apt-mark manual libldap-2.5-0 libsasl2-2 \
    && apt-get purge -y --auto-remove gcc libc6-dev libldap2-dev libsasl2-dev \
    && rm -rf /var/lib/apt/lists/*
COPY . .
RUN DEBUG=1 python manage.py collectstatic --noinput
RUN useradd --create-home portal \
    && mkdir -p /var/lib/gpu-portal/metrics && chown portal /var/lib/gpu-portal/metrics
USER portal
EXPOSE 8000
CMD ["python", "-m", "portal.web", "--host", "0.0.0.0", "--port", "8000"]
