#!/usr/bin/env bash
# Install pia from this repository's wheels into a fresh virtual environment, with the locked versions of their
# non-dev dependencies: the wheels carry exactly the packages pyproject.toml names, so no list of folders exists to
# drift. The Dockerfile runs it to build the image; tests/test_packaging.py runs it into a temporary directory and
# drives the installed commands from there, so the image's steps are the tested ones.
#
#   packaging/install.sh server TARGET [EXTRA ...]   the server (pia, with pia-client and pia-contracts), as the image holds it;
#                                                    EXTRA: extras of pia to add, such as audit
#   packaging/install.sh client TARGET               pia-client with pia-contracts alone, as a planning partner installs it
#
# uv's cache serves packages it has already fetched (uv sync fills it), so nothing is downloaded twice.
set -euo pipefail

usage="usage: $0 server|client TARGET [EXTRA ...]"
what=${1:?$usage}
target=${2:?$usage}
shift 2
extras=("$@")
cd "$(dirname "$0")/.."
uv=${UV:-uv}  # `uv run` names its own binary in UV
export UV_LINK_MODE=copy  # the cache may be on another file system (a Docker cache mount, a temporary dir)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

export_options=(--frozen --no-dev --no-emit-workspace --no-hashes --quiet)
for extra in "${extras[@]}"; do export_options+=(--extra "$extra"); done
"$uv" export "${export_options[@]}" --output-file "$work/constraints.txt"

case $what in
  server)
    "$uv" build --all-packages --wheel --quiet --out-dir "$work/wheels"
    extra_list=$(IFS=,; echo "${extras[*]}")
    wheels=("$work"/wheels/pia-*.whl "$work"/wheels/pia_client-*.whl "$work"/wheels/pia_contracts-*.whl)
    wheels[0]="${wheels[0]}${extra_list:+[$extra_list]}"
    ;;
  client)
    for package in pia-contracts pia-client; do
      "$uv" build --package "$package" --wheel --quiet --out-dir "$work/wheels"
    done
    wheels=("$work"/wheels/pia_client-*.whl "$work"/wheels/pia_contracts-*.whl)
    ;;
  *)
    echo "$usage" >&2
    exit 2
    ;;
esac

"$uv" venv --quiet "$target"
"$uv" pip install --quiet --python "$target/bin/python" --constraint "$work/constraints.txt" "${wheels[@]}"
