#!/usr/bin/env bash
# The browser tests drive the distribution's Chromium (Playwright's own download is not
# used): `make test` installs it when neither it nor $CHROMIUM is there. On a machine
# without apt-get it says what to install; the browser tests then fail with the same advice.
set -euo pipefail
if [ -n "${CHROMIUM:-}" ] || command -v chromium >/dev/null 2>&1 \
    || command -v chromium-browser >/dev/null 2>&1; then
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "no Chromium for the browser tests: install your distribution's chromium package" >&2
    echo "or set CHROMIUM to its path" >&2
    exit 0
fi
SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq chromium
