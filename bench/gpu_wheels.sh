#!/usr/bin/env bash
# The wheels that importing the engine and running bench/gpu_tasks.py need on the GPU machine and that
# it lacks (Python 3.12, manylinux x86_64, no network; it has torch, torchvision, torchaudio,
# transformers, numpy, pandas, pyarrow, scikit-learn, scipy, safetensors, tokenizers, pyyaml,
# huggingface_hub, tqdm, pillow and their dependencies), downloaded into .whl/ at the repository root
# at the versions of this checkout's venv (.venv/bin/pip freeze). Run it here, where there is network:
#
#     bash bench/gpu_wheels.sh            # then the device run of bench/gpu_tasks.py carries .whl
#
# The list is what the script's processes (it, the run workers, the evaluation job) had imported at
# their exit (sys.modules, recorded through a sitecustomize on the CPU), less what the device has
# (scikit-learn's own narwhals, rich and joblib's cloudpickle come with the device's scikit-learn);
# pycparser is cffi's (not imported at run time: soundfile and argon2 ship compiled bindings).
# typing_extensions travels for pydantic (it needs a recent one; the same version shadows the device's).
# The folder is emptied first, so that no wheel of an older pin is left beside the new one.
# On the device: python3 -m pip install --no-index --no-deps --target /tmp/site .whl/*.whl (the full
# line is in bench/gpu_tasks.py's docstring).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV_PY=${VENV_PY:-.venv/bin/python}
WHEELS=(
  pydantic pydantic_core annotated-types typing-inspection typing_extensions  # engine.config
  duckdb                                                                       # engine.store (metrics)
  soundfile cffi pycparser                                                     # audio import, the clips
  argon2-cffi argon2-cffi-bindings                                             # engine.access (engine.api)
  charset-normalizer                                                           # engine.data.archive
  scikit-image lazy-loader                                                     # masking units, image figures
)
rm -rf .whl && mkdir .whl
for name in "${WHEELS[@]}"; do
  version=$("$VENV_PY" -c 'import importlib.metadata as m, sys; print(m.version(sys.argv[1]))' "$name")
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "$name==$version"
done
ls -1 .whl
du -sh .whl
