#!/usr/bin/env bash
# The GPU figures of docs/benchmarks-pretrain.md ("GPU") in one call, for a machine lent for minutes:
#   0. the CUDA cases of the unit tests (gradient clipping folded into CUDA's fused AdamW);
#   1. the pretraining step, ours against transformers' BertForPreTraining, bfloat16, BERT-base and BERT-large,
#      seq 128 (batch 128, 20 masked positions) and seq 512 (batch 32, 80): tokens/s, ratio, MFU; BERT-base at
#      batch 512, and in float32;
#   2. numerical parity with transformers on the GPU (evaluation.model_parity: float32 with TF32 off must hold;
#      bfloat16's error beside transformers' own, with its eager and its sdpa attention);
#   3. the pretraining loop on the GPU (bert_core.pretrain.step.pretrain, as a Ray worker runs it) against the
#      transformers peer at L4/H256 on WikiText-2: held-out accuracy over time with --dtype auto (bfloat16
#      there), float32 and float16 (loss scaling: the path older GPUs take), three seeds; the peer's lr grid.
# Step 3 needs shards made beforehand (segmentation needs NLTK's Punkt, which such a machine may lack):
#   python -m evaluation.pretrain_convergence --data-only --work-dir GPU_DATA/conv
#       # makes GPU_DATA/conv/shards-64-10-5-0.1{,-heldout}
# then copy the corpus to GPU_DATA/wiki_docs.txt and the vocab to GPU_DATA/vocab.txt.
#
#   GPU_DATA=.gpu OUT=bench-results/gpu bash evaluation/gpu_benchmarks.sh
set -u
OUT=${OUT:-bench-results/gpu}
GPU_DATA=${GPU_DATA:-.gpu}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
status=0
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"

# CUDA cases of the unit tests that CI (no GPU) skips; --noconftest: the suite's conftest needs Ray, Airflow and
# the rest of our pins, which such a machine lacks.
python3 -m pytest --noconftest -p no:cacheprovider -q -rs tests/bert_core/train/test_optim.py -k folded || status=1

python3 -m evaluation.pretrain_throughput --configs bert_12_768_12 bert_24_1024_16 --dtype bfloat16 \
    --batch-size 128 --max-seq-length 128 --max-predictions 20 --steps 20 --warmup 5 \
    --out-json "$OUT/throughput_seq128.json" || status=1
python3 -m evaluation.pretrain_throughput --configs bert_12_768_12 bert_24_1024_16 --dtype bfloat16 \
    --batch-size 32 --max-seq-length 512 --max-predictions 80 --steps 20 --warmup 5 \
    --out-json "$OUT/throughput_seq512.json" || status=1
# Does the MFU grow with the batch (a step bound by kernel launches)? And what float32 would give.
python3 -m evaluation.pretrain_throughput --configs bert_12_768_12 --dtype bfloat16 --batch-size 512 --steps 10 \
    --warmup 3 --out-json "$OUT/throughput_seq128_batch512.json" || status=1
python3 -m evaluation.pretrain_throughput --configs bert_12_768_12 --dtype float32 --batch-size 128 --steps 10 \
    --warmup 3 --out-json "$OUT/throughput_seq128_fp32.json" || status=1

python3 -m evaluation.model_parity --device cuda --configs bert_2_128_2 bert_12_768_12 \
    --out-json "$OUT/parity_eager.json" || status=1
python3 -m evaluation.model_parity --device cuda --configs bert_12_768_12 --peer-attention sdpa \
    --out-json "$OUT/parity_sdpa.json" || status=1

if [ -d "$GPU_DATA/conv" ]; then
    python3 -m evaluation.pretrain_convergence --device cuda --work-dir "$GPU_DATA/conv" \
        --corpus "$GPU_DATA/wiki_docs.txt" --vocab "$GPU_DATA/vocab.txt" --configs bert_4_256_4:400 \
        --seeds 0 1 2 --our-dtypes float32 float16 --peer-lrs 5e-4 1e-3 2e-3 --out-json "$OUT/convergence_l4_gpu.json" || status=1
else
    echo "no $GPU_DATA/conv: the pretraining-loop run is skipped (see the top of this script)"
fi
exit $status
