#!/usr/bin/env bash
# Take the README's screenshots (docs/images/upload.png, schema.png, results.png) from the real
# pages: Chromium against a live server with a real Celery worker, as the browser tests run
# (tests/e2e/docs_screenshots.py; not part of ./test.sh). Run it after changing those pages.
#   scripts/docs_screenshots.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/common.sh

export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
ensure_venv requirements-dev.txt
ensure_redis
ensure_chromium
ensure_pdf_libraries
if ensure_postgres; then export DATABASE_URL=$pg_url; fi
"$PY" -m pytest -q tests/e2e/docs_screenshots.py
ls -l docs/images/*.png
