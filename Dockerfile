# syntax=docker/dockerfile:1
# The image runs this repository's wheels, installed with their locked dependencies by packaging/install.sh: the
# same script tests/test_packaging.py runs and then drives the installed commands, so no list of folders can drift.
# Add the audit extra (great-expectations, for `pia pipeline audit`) with --build-arg PIA_EXTRAS=audit.
FROM python:3.11-slim AS build
RUN pip install --no-cache-dir uv
WORKDIR /src
COPY . .
ARG PIA_EXTRAS=""
# uv's cache outlives the build, so a rebuild downloads nothing it fetched before.
RUN --mount=type=cache,target=/root/.cache/uv packaging/install.sh server /opt/pia $PIA_EXTRAS

FROM python:3.11-slim
COPY --from=build /opt/pia /opt/pia
ENV PATH="/opt/pia/bin:$PATH"
ENTRYPOINT ["pia"]
