FROM python:3.11-slim
RUN pip install --no-cache-dir uv
WORKDIR /app
COPY pyproject.toml uv.lock README.md ./
COPY contracts contracts
COPY ingest ingest
COPY pipeline pipeline
COPY serving serving
COPY settings settings
COPY events events
COPY benchmarks benchmarks
COPY db db
RUN uv sync --locked --no-dev
ENV PATH="/app/.venv/bin:$PATH"
ENTRYPOINT ["pia"]
