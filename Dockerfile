# The gate server image: installed exactly as the README does (`pip install .`), plus the
# PostgreSQL driver extra.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY gate gate
COPY channels channels
COPY templates templates
COPY migrations migrations
RUN pip install '.[postgres]' && useradd --system --home /nonexistent gate
WORKDIR /
USER gate
EXPOSE 8000
CMD ["gate", "serve", "--host", "0.0.0.0", "--port", "8000"]
