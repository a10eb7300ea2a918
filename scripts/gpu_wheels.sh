#!/usr/bin/env bash
# The app's packages that the GPU machine's image lacks, as Python 3.12 wheels in .whl/ (git-ignored),
# for the GPU check's app part. The machine reaches no registry: the wheels travel with the tree.
#   scripts/gpu_wheels.sh        # here, once; then on the GPU machine (the device call carries .whl):
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qxF '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
mkdir -p .whl
# gradio and plotly with every dependency the image does not have (checked against its package list).
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
  gradio==6.31.0 gradio_client==2.7.2 plotly==7.1.0 brotli==1.2.1 fastapi==0.165.0 starlette==1.10.0 \
  pydantic==2.14.4 annotated-types==0.8.0 pydantic_core==2.50.5 typing-inspection==0.4.5 opentelemetry-api==1.45.2 \
  httpx2==2.16.2 httpcore2==2.16.2 truststore==0.10.5 groovy==0.1.2 hf-gradio==0.4.1 orjson==3.13.0 tzdata==2026.6 \
  pydub==0.25.1 python-multipart==0.0.34 pytz==2026.6 safehttpx==0.1.7 semantic-version==2.10.0 tomlkit==0.14.0 \
  uvicorn==0.55.0
du -sh .whl
