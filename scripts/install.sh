#!/usr/bin/env bash
# Install masklab into ./.venv (pinned requirements) and, where apt is available, the OS packages:
#   dataset-fashion-mnist (bundled Fashion-MNIST)   always
#   fortunes (bundled text set, Debian's fortune cookies)   always
#   asterisk-core-sounds-en-wav (bundled audio set, studio voice prompts)   always
#   tuxpaint-stamps-default (bundled image-caption pairs, Tux Paint stamps)   always
#   chromium                                        with --dev (real-browser tests)
# and, with --cluster, the optional cluster back-ends (requirements-cluster.txt).
# Re-running is cheap: pip is skipped while the requirements file is unchanged.
set -euo pipefail
cd "$(dirname "$0")/.."
# --cluster adds the optional cluster back-ends (requirements-cluster.txt: Ray, submitit).
dev=0; cluster=0
for a in "$@"; do
  case "$a" in
    --dev) dev=1 ;;
    --cluster) cluster=1 ;;
    *) echo "usage: scripts/install.sh [--dev] [--cluster]" >&2; exit 2 ;;
  esac
done
req=requirements.txt; [ $dev = 1 ] && req=requirements-dev.txt

apt_pkgs=(dataset-fashion-mnist fortunes asterisk-core-sounds-en-wav tuxpaint-stamps-default)
[ $dev = 1 ] && apt_pkgs+=(chromium)
missing=()
for p in "${apt_pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  if command -v apt-get >/dev/null 2>&1; then
    sudo=""; [ "$(id -u)" != 0 ] && command -v sudo >/dev/null 2>&1 && sudo="sudo"
    if [ "$(id -u)" = 0 ] || [ -n "$sudo" ]; then
      echo "installing OS packages: ${missing[*]}"
      $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null \
        || echo "warning: could not install ${missing[*]}; the app says how to get the bundled sets" >&2
    else
      echo "note: not root and no sudo: skipping ${missing[*]} (sudo apt-get install ${missing[*]})" >&2
    fi
  else
    echo "note: no apt-get: Fashion-MNIST, fortunes, asterisk-prompts and tuxpaint-stamps are unavailable (the app explains); digits always works" >&2
  fi
fi

[ -x .venv/bin/python ] || python3 -m venv .venv
stamp=".venv/.installed-$(cat requirements*.txt | sha256sum | cut -c1-16)-$dev$cluster"
if [ ! -f "$stamp" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip >/dev/null
  # pip byte-compiles on one core; compileall after it uses every core (120 s -> 65 + 23 s on 2 cores,
  # measured). Compiled here once, as imports never write bytecode where PYTHONDONTWRITEBYTECODE is set.
  .venv/bin/python -m pip install --quiet --no-compile -r "$req"
  [ $cluster = 1 ] && .venv/bin/python -m pip install --quiet --no-compile -r requirements-cluster.txt
  site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  .venv/bin/python -m compileall -q -j 0 "$site" >/dev/null 2>&1 || true  # a package's unparsable test file is not an error, as in pip
  touch "$stamp"
fi
# The checkout on the venv's path, so that `.venv/bin/python bench/X.py` (and any script outside the
# repository's root) imports engine, app and bench as `python -m ...` from the root does.
site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
[ "$(cat "$site/masklab-checkout.pth" 2>/dev/null)" = "$PWD" ] || echo "$PWD" > "$site/masklab-checkout.pth"
