#!/usr/bin/env python3
"""Predicts every BF16 run of llm-foundry's MPT throughput tables with shardcast and compares.

    python3 scripts/llm-foundry-crosscheck.py [SHARDCAST] [--csv FILE]

SHARDCAST defaults to build/cli/shardcast. Standard library only; runs on a CPU (about 1.5 minutes).
Exits 2 on a bad argument or binary, 1 when any run could not be simulated.

What for: validation/published_runs.csv holds nine of these runs (rows 205-219: the H100 table's
MPT-3b, 13b and 70b at 128-512 GPUs). The same README has 200 more BF16 runs: the large-scale
table's MPT-1b, 7b and 30b, and 191 runs on H100, A100 80GB and 40GB at 8-128 GPUs, with and
without activation checkpointing, sequences of 512 to 65536 tokens, measured with the same scripts
(those ran llm-foundry's Triton attention, which shardcast does not model: ATTENTION below). They are not in the validation
table; this script checks what the model says about them, in particular whether the rows 217-219
are under-predicted for a reason that the other runs without checkpointing share
(docs/accuracy.md, "Where the remaining error comes from").

Source: mosaicml/llm-foundry, scripts/train/benchmarking/README.md at commit 495218376 (2024-04),
tables "H100 80GB BF16 (Large Scale, >= 128 GPUs)", "H100 80GB BF16", "A100 80GB with 1600 Gbps
node-node interconnect (RoCE)" and "A100 40GB with 1600 Gbps node-node interconnect (RoCE)"
(the FP8 table is left out). Each run: `composer train/train.py` on yamls/pretrain/mpt-*.yaml as
submit_benchmarks.py edits it (30 batches; Composer's speed monitor over the last 10; MPTConfig
defaults: learned positions, biases, low-precision LayerNorm; FlashAttention-2; flash-attn's fused
loss). The measured step is the published throughput read back: global batch x sequence /
(Throughput (T/s)); rows whose global batch is not GPUs x micro-batch x accumulation would be left
out (none is). MP Mode DEFAULT reduces gradients in fp32
(shardcast's default under --optimizer fsdp), PURE in bf16 (--bf16-main-grads). FULL_SHARD is
--zero 3, SHARD_GRAD_OP --zero 2.

Prints one line per run (measured and predicted step, error) and a summary by table, by
activation checkpointing and by sequence length. The `extra/layer` column is the measured minus the
predicted step over (layers x micro-batches per GPU), in ms: what each layer's forward and
backward of one micro-batch took beyond the model. --csv FILE writes the lines as CSV.
"""
import csv
import json
import os
import subprocess
import sys
import tempfile

# yamls/pretrain/mpt-*.yaml at 495218376: d_model, n_layers, n_heads (vocabulary 50368, expansion 4).
SHAPES = {
    "125m": (768, 12, 12), "350m": (1024, 24, 16), "760m": (1536, 24, 12), "1b": (2048, 24, 16),
    "3b": (2560, 32, 20), "7b": (4096, 32, 32), "13b": (5120, 40, 40), "30b": (7168, 48, 56),
    "70b": (8192, 80, 64),
}
VOCAB = 50368
CLUSTERS = {"H100L": "dgx-h100", "H100": "dgx-h100", "A100-80": "dgx-a100", "A100-40": "dgx-a100-40gb"}
# How each table's runs computed attention. The large-scale table came with sweep.py (commit
# 5e85bd62d, 2024-01): llm-foundry main with `.[gpu-flash2]` and `--attn_impl flash`,
# FlashAttention-2, which is what shardcast's fa2 rates are. The other tables predate it
# (1ef7b4d21, 2023-05; b2a43a147, 2023-10): submit_benchmarks.py then defaulted to
# `--attn_impl triton` (llm-foundry's Triton flash attention, flash-attn 1.0.9's era) and sweep.sh
# does not override it. shardcast has no rates for that kernel, so in those tables the attention,
# and most of all the long sequences, is not what the model prices.
# sweep.py itself sets `--attn_impl triton` for 13b and 30b (their runs of the large-scale table,
# validate rows 211-213 among them) and `flash` for 1b, 3b, 7b and 70b.
ATTENTION = {"H100L": "FlashAttention-2 (13b, 30b: Triton)", "H100": "Triton (not modelled)",
             "A100-80": "Triton (not modelled)", "A100-40": "Triton (not modelled)"}

# table, model, seq, GPUs, MFU %, micro-batch, accumulation, global batch, throughput (T/s),
# MP mode, sharding, activation checkpointing, NumParams: the README's columns, in its row order.
RUNS = """
H100L 70b 2048 512 41.25 8 1 4096 515636 DEFAULT FULL_SHARD True 64862437376
H100L 70b 2048 256 42.42 8 1 2048 265149 DEFAULT FULL_SHARD True 64862437376
H100L 70b 2048 128 43.36 8 1 1024 135490 DEFAULT FULL_SHARD True 64862437376
H100L 30b 2048 512 40.27 8 1 4096 1083366 DEFAULT FULL_SHARD True 29975214080
H100L 30b 2048 256 40.89 8 1 2048 550022 DEFAULT FULL_SHARD True 29975214080
H100L 30b 2048 128 41.85 8 1 1024 281491 DEFAULT FULL_SHARD True 29975214080
H100L 13b 2048 512 41.12 16 1 8192 2535811 DEFAULT FULL_SHARD True 12853954560
H100L 13b 2048 256 41.42 16 1 4096 1277214 DEFAULT FULL_SHARD True 12853954560
H100L 13b 2048 128 42.18 16 1 2048 650264 DEFAULT FULL_SHARD True 12853954560
H100L 7b 2048 512 42.2 6 1 3072 4951479 DEFAULT FULL_SHARD False 6658859008
H100L 7b 2048 256 44.15 6 1 1536 2590548 DEFAULT FULL_SHARD False 6658859008
H100L 7b 2048 128 45.71 6 1 768 1340830 DEFAULT FULL_SHARD False 6658859008
H100L 3b 2048 512 39.24 8 1 4096 11092218 DEFAULT SHARD_GRAD_OP False 2651837440
H100L 3b 2048 256 41.25 8 1 2048 5829686 DEFAULT SHARD_GRAD_OP False 2651837440
H100L 3b 2048 128 42.43 8 1 1024 2998098 DEFAULT SHARD_GRAD_OP False 2651837440
H100L 1b 2048 512 36.65 12 1 6144 20396905 DEFAULT SHARD_GRAD_OP False 1315950592
H100L 1b 2048 256 39.15 12 1 3072 10894207 DEFAULT SHARD_GRAD_OP False 1315950592
H100L 1b 2048 128 40.6 12 1 1536 5647854 DEFAULT SHARD_GRAD_OP False 1315950592
H100 70b 2048 64 42.57 8 4 2048 66523 DEFAULT FULL_SHARD True 64862437376
H100 70b 2048 32 36.15 2 16 1024 28242 DEFAULT FULL_SHARD True 64862437376
H100 30b 8192 8 29.92 1 21 168 11072 DEFAULT FULL_SHARD True 30019254272
H100 30b 4096 8 35.86 1 21 168 14419 DEFAULT FULL_SHARD True 29989894144
H100 30b 2048 32 43.92 14 3 1344 73860 DEFAULT FULL_SHARD True 29975214080
H100 30b 2048 16 43.07 10 3 480 36209 DEFAULT FULL_SHARD True 29975214080
H100 30b 2048 8 38.11 3 21 504 16022 DEFAULT FULL_SHARD True 29975214080
H100 30b 1024 8 38.76 6 21 1008 16672 DEFAULT FULL_SHARD True 29967874048
H100 13b 32768 8 31.68 1 3 24 15812 DEFAULT FULL_SHARD True 13011240960
H100 13b 16384 8 35.55 3 3 72 23881 DEFAULT FULL_SHARD True 12927354880
H100 13b 4096 8 41.6 10 3 240 37740 DEFAULT FULL_SHARD True 12864440320
H100 13b 2048 64 39.86 2 1 128 307209 DEFAULT FULL_SHARD False 12853954560
H100 13b 2048 32 39.95 2 1 64 153960 DEFAULT FULL_SHARD False 12853954560
H100 13b 2048 16 39.58 2 1 32 76280 DEFAULT FULL_SHARD False 12853954560
H100 13b 2048 8 39.79 2 1 16 38336 DEFAULT FULL_SHARD False 12853954560
H100 13b 1024 8 44.27 40 3 960 44019 DEFAULT FULL_SHARD True 12848711680
H100 7b 65536 8 28.59 1 2 16 15654 DEFAULT FULL_SHARD True 6918905856
H100 7b 32768 8 30.94 2 2 32 26550 DEFAULT FULL_SHARD True 6784688128
H100 7b 8192 8 37.14 8 2 128 55481 DEFAULT FULL_SHARD True 6684024832
H100 7b 4096 8 40.42 16 2 256 68893 DEFAULT FULL_SHARD True 6667247616
H100 7b 2048 8 46.44 6 1 48 85144 DEFAULT FULL_SHARD False 6658859008
H100 7b 1024 8 42.83 64 2 1024 81628 DEFAULT FULL_SHARD True 6654664704
H100 3b 65536 8 26.81 1 2 16 26099 DEFAULT FULL_SHARD True 2814366720
H100 3b 32768 8 28.84 3 6 144 46984 DEFAULT FULL_SHARD True 2730480640
H100 3b 16384 8 36.34 1 6 48 89223 DEFAULT FULL_SHARD False 2688537600
H100 3b 8192 8 40.31 3 6 144 132626 DEFAULT FULL_SHARD False 2667566080
H100 3b 4096 8 42.31 5 6 240 167712 DEFAULT FULL_SHARD False 2657080320
H100 3b 2048 64 40.8 6 3 1152 1441663 DEFAULT FULL_SHARD False 2651837440
H100 3b 2048 32 41.7 6 3 576 736701 DEFAULT FULL_SHARD False 2651837440
H100 3b 2048 16 43.73 10 3 480 386285 DEFAULT FULL_SHARD False 2651837440
H100 3b 1024 8 46.2 20 6 960 216369 DEFAULT FULL_SHARD False 2649216000
H100 3b 512 8 46.32 40 6 1920 223721 DEFAULT FULL_SHARD False 2647905280
H100 1b 65536 8 26.34 1 2 16 44050 DEFAULT FULL_SHARD True 1445974016
H100 1b 32768 8 33.54 1 4 32 96203 DEFAULT FULL_SHARD False 1378865152
H100 1b 16384 8 35.22 2 4 64 157194 DEFAULT FULL_SHARD False 1345310720
H100 1b 8192 8 37.73 3 4 96 233256 DEFAULT FULL_SHARD False 1328533504
H100 1b 4096 8 40.26 7 4 224 308282 DEFAULT FULL_SHARD False 1320144896
H100 1b 2048 64 40.85 20 1 1280 2841754 DEFAULT FULL_SHARD False 1315950592
H100 1b 2048 32 41.52 20 1 640 1444183 DEFAULT FULL_SHARD False 1315950592
H100 1b 2048 16 42.36 20 1 320 736596 DEFAULT FULL_SHARD False 1315950592
H100 1b 2048 8 41.82 14 1 112 363645 DEFAULT FULL_SHARD False 1315950592
H100 1b 1024 8 41.95 18 4 576 391287 DEFAULT FULL_SHARD False 1313853440
H100 1b 512 8 43.21 56 4 1792 418201 DEFAULT FULL_SHARD False 1312804864
H100 760m 32768 8 31.84 1 2 16 130333 DEFAULT FULL_SHARD False 807656448
H100 760m 16384 8 33.57 3 2 48 222521 DEFAULT FULL_SHARD False 782490624
H100 760m 8192 8 34.84 6 2 96 334602 DEFAULT FULL_SHARD False 769907712
H100 760m 4096 8 35.83 12 2 192 443674 DEFAULT FULL_SHARD False 763616256
H100 760m 2048 32 37.57 24 1 768 2175091 DEFAULT FULL_SHARD False 760470528
H100 760m 2048 16 37.89 24 1 384 1096819 DEFAULT FULL_SHARD False 760470528
H100 760m 2048 8 34.9 24 2 384 505177 DEFAULT FULL_SHARD False 760470528
H100 760m 1024 8 39.76 48 2 768 628648 DEFAULT FULL_SHARD False 758897664
H100 760m 512 8 40.42 96 2 1536 669998 DEFAULT FULL_SHARD False 758111232
A100-80 70b 2048 64 53.33 8 4 2048 26274 PURE FULL_SHARD True 64862437376
A100-80 70b 2048 32 48.56 2 16 1024 11962 PURE FULL_SHARD True 64862437376
A100-80 30b 8192 8 39.38 1 21 168 4594 DEFAULT FULL_SHARD True 30019254272
A100-80 30b 4096 8 51.37 1 21 168 6513 DEFAULT FULL_SHARD True 29989894144
A100-80 30b 2048 8 55.3 3 21 504 7330 DEFAULT FULL_SHARD True 29975214080
A100-80 30b 1024 8 55.82 6 21 1008 7571 DEFAULT FULL_SHARD True 29967874048
A100-80 30b 512 8 56.4 12 21 2016 7739 DEFAULT FULL_SHARD True 29964204032
A100-80 13b 32768 8 51.69 1 3 24 8134 DEFAULT FULL_SHARD True 13011240960
A100-80 13b 16384 8 54.07 3 3 72 11454 DEFAULT FULL_SHARD True 12927354880
A100-80 13b 8192 8 56.07 5 3 120 14362 DEFAULT FULL_SHARD True 12885411840
A100-80 13b 4096 8 57.62 10 3 240 16482 DEFAULT FULL_SHARD True 12864440320
A100-80 13b 2048 8 59.57 2 3 48 18097 DEFAULT FULL_SHARD False 12853954560
A100-80 13b 1024 8 59.48 40 3 960 18647 DEFAULT FULL_SHARD True 12848711680
A100-80 7b 65536 8 46.97 1 2 16 8108 DEFAULT FULL_SHARD True 6918905856
A100-80 7b 32768 8 49.46 2 2 32 13382 DEFAULT FULL_SHARD True 6784688128
A100-80 7b 16384 8 51.96 4 2 64 19629 DEFAULT FULL_SHARD True 6717579264
A100-80 7b 8192 8 54.47 8 2 128 25655 DEFAULT FULL_SHARD True 6684024832
A100-80 7b 4096 8 54.84 16 2 256 29472 DEFAULT FULL_SHARD True 6667247616
A100-80 7b 2048 8 64.23 6 2 96 37130 DEFAULT FULL_SHARD False 6658859008
A100-80 7b 1024 8 58.01 64 2 1024 34857 DEFAULT FULL_SHARD True 6654664704
A100-80 3b 65536 8 46.05 1 2 16 14137 DEFAULT FULL_SHARD True 2814366720
A100-80 3b 32768 8 47.18 3 6 144 24235 DEFAULT FULL_SHARD True 2730480640
A100-80 3b 16384 8 57.13 1 6 48 44233 DEFAULT FULL_SHARD False 2688537600
A100-80 3b 8192 8 59.34 3 6 144 61567 DEFAULT FULL_SHARD False 2667566080
A100-80 3b 4096 8 60.53 5 6 240 75658 DEFAULT FULL_SHARD False 2657080320
A100-80 3b 2048 8 62.11 10 2 160 86491 DEFAULT FULL_SHARD False 2651837440
A100-80 3b 1024 8 62.73 20 6 960 92643 DEFAULT FULL_SHARD False 2649216000
A100-80 3b 512 8 63.71 40 6 1920 97019 DEFAULT FULL_SHARD False 2647905280
A100-80 1b 65536 8 46.18 1 2 16 24353 DEFAULT FULL_SHARD True 1445974016
A100-80 1b 32768 8 55.52 1 4 32 50207 DEFAULT FULL_SHARD False 1378865152
A100-80 1b 16384 8 56.6 2 4 64 79650 DEFAULT FULL_SHARD False 1345310720
A100-80 1b 8192 8 56.69 3 4 96 110516 DEFAULT FULL_SHARD False 1328533504
A100-80 1b 4096 8 59.0 7 4 224 142457 DEFAULT FULL_SHARD False 1320144896
A100-80 1b 2048 8 59.86 14 4 448 164109 DEFAULT FULL_SHARD False 1315950592
A100-80 1b 1024 8 60.15 18 4 576 176898 DEFAULT FULL_SHARD False 1313853440
A100-80 1b 512 8 60.68 56 4 1792 185186 DEFAULT FULL_SHARD False 1312804864
A100-80 760m 65536 8 45.34 1 2 16 33150 DEFAULT FULL_SHARD True 857988096
A100-80 760m 32768 8 54.57 1 2 16 70417 DEFAULT FULL_SHARD False 807656448
A100-80 760m 16384 8 54.64 3 2 48 114198 DEFAULT FULL_SHARD False 782490624
A100-80 760m 8192 8 55.31 6 2 96 167471 DEFAULT FULL_SHARD False 769907712
A100-80 760m 4096 8 56.05 12 2 192 218808 DEFAULT FULL_SHARD False 763616256
A100-80 760m 2048 8 56.85 24 2 384 259472 DEFAULT FULL_SHARD False 760470528
A100-80 760m 1024 8 47.76 48 2 768 238122 DEFAULT FULL_SHARD False 758897664
A100-80 760m 512 8 45.07 96 2 1536 235571 DEFAULT FULL_SHARD False 758111232
A100-80 350m 65536 8 52.7 1 2 16 60195 DEFAULT FULL_SHARD False 420997120
A100-80 350m 32768 8 52.46 2 2 32 109222 DEFAULT FULL_SHARD False 387442688
A100-80 350m 16384 8 53.28 4 2 64 188478 DEFAULT FULL_SHARD False 370665472
A100-80 350m 8192 8 53.8 8 2 128 292559 DEFAULT FULL_SHARD False 362276864
A100-80 350m 4096 8 53.31 16 2 256 396442 DEFAULT FULL_SHARD False 358082560
A100-80 350m 2048 8 51.62 32 2 512 470263 DEFAULT FULL_SHARD False 355985408
A100-80 350m 1024 8 50.51 64 2 1024 518504 DEFAULT FULL_SHARD False 354936832
A100-80 350m 512 8 50.61 128 2 2048 554643 DEFAULT FULL_SHARD False 354412544
A100-80 125m 65536 8 54.13 1 2 16 162946 DEFAULT FULL_SHARD False 174070272
A100-80 125m 32768 8 52.71 2 2 32 291256 DEFAULT FULL_SHARD False 148904448
A100-80 125m 16384 8 50.61 4 2 64 480322 DEFAULT FULL_SHARD False 136321536
A100-80 125m 8192 8 48.85 8 2 128 723142 DEFAULT FULL_SHARD False 130030080
A100-80 125m 4096 8 46.08 16 2 256 947172 DEFAULT FULL_SHARD False 126884352
A100-80 125m 2048 8 44.79 40 2 640 1142641 DEFAULT FULL_SHARD False 125311488
A100-80 125m 2048 8 44.45 32 2 512 1133901 DEFAULT FULL_SHARD False 125311488
A100-80 125m 1024 8 43.15 64 2 1024 1251751 DEFAULT FULL_SHARD False 124525056
A100-80 125m 512 8 42.56 128 2 2048 1325455 DEFAULT FULL_SHARD False 124131840
A100-40 70b 2048 128 48.91 4 1 512 48194 PURE FULL_SHARD True 64862437376
A100-40 70b 2048 64 35.87 2 1 128 17672 PURE FULL_SHARD True 64862437376
A100-40 30b 2048 128 52.25 6 1 768 110803 PURE FULL_SHARD True 29975214080
A100-40 30b 2048 32 51.74 4 1 128 27431 PURE FULL_SHARD True 29975214080
A100-40 13b 8192 8 43.95 1 16 128 11258 PURE FULL_SHARD True 12885411840
A100-40 13b 4096 8 44.85 2 16 256 12830 PURE FULL_SHARD True 12864440320
A100-40 13b 2048 128 51.93 16 1 2048 252444 PURE FULL_SHARD True 12853954560
A100-40 13b 2048 64 52.04 16 1 1024 126479 PURE FULL_SHARD True 12853954560
A100-40 13b 2048 32 52.62 14 1 448 63946 PURE FULL_SHARD True 12853954560
A100-40 13b 2048 16 52.5 10 1 160 31900 PURE FULL_SHARD True 12853954560
A100-40 13b 2048 8 43.94 4 16 512 13347 PURE FULL_SHARD True 12853954560
A100-40 13b 1024 8 44.07 8 16 1024 13817 PURE FULL_SHARD True 12848711680
A100-40 13b 512 8 44.28 16 16 2048 14108 PURE FULL_SHARD True 12846090240
A100-40 7b 16384 8 47.65 1 4 32 17998 PURE FULL_SHARD True 6717579264
A100-40 7b 8192 8 49.04 3 4 96 23098 PURE FULL_SHARD True 6684024832
A100-40 7b 4096 8 50.11 6 4 192 26930 PURE FULL_SHARD True 6667247616
A100-40 7b 2048 128 50.14 18 1 2304 463749 PURE FULL_SHARD True 6658859008
A100-40 7b 2048 64 50.73 18 1 1152 234614 PURE FULL_SHARD True 6658859008
A100-40 7b 2048 32 51.55 18 1 576 119202 PURE FULL_SHARD True 6658859008
A100-40 7b 2048 16 50.44 16 1 256 58322 PURE FULL_SHARD True 6658859008
A100-40 7b 2048 8 50.92 12 4 384 29436 PURE FULL_SHARD True 6658859008
A100-40 7b 1024 8 51.31 24 4 768 30833 PURE FULL_SHARD True 6654664704
A100-40 7b 512 8 50.85 48 4 1536 31167 PURE FULL_SHARD True 6652567552
A100-40 3b 32768 8 46.03 1 4 32 23640 PURE FULL_SHARD True 2730480640
A100-40 3b 16384 8 46.14 2 8 128 35726 PURE FULL_SHARD True 2688537600
A100-40 3b 8192 8 55.13 1 8 64 57193 PURE FULL_SHARD False 2667566080
A100-40 3b 4096 8 56.18 2 8 128 70223 PURE FULL_SHARD False 2657080320
A100-40 3b 2048 128 54.8 6 1 768 1220885 PURE FULL_SHARD False 2651837440
A100-40 3b 2048 64 55.94 6 1 384 623167 PURE FULL_SHARD False 2651837440
A100-40 3b 2048 32 56.96 6 1 192 317261 PURE FULL_SHARD False 2651837440
A100-40 3b 2048 16 56.02 5 1 80 156013 PURE FULL_SHARD False 2651837440
A100-40 3b 2048 8 57.82 5 8 320 80520 PURE FULL_SHARD False 2651837440
A100-40 3b 1024 8 58.14 10 8 640 85854 PURE FULL_SHARD False 2649216000
A100-40 3b 512 8 59.49 20 8 1280 90596 PURE FULL_SHARD False 2647905280
A100-40 1b 32768 8 45.07 1 4 32 40762 PURE FULL_SHARD True 1378865152
A100-40 1b 16384 8 55.23 1 8 64 77723 PURE FULL_SHARD False 1345310720
A100-40 1b 8192 8 55.29 2 8 128 107799 PURE FULL_SHARD False 1328533504
A100-40 1b 4096 8 55.85 4 8 256 134851 PURE FULL_SHARD False 1320144896
A100-40 1b 2048 128 54.41 10 1 1280 2386897 PURE FULL_SHARD False 1315950592
A100-40 1b 2048 64 55.44 10 1 640 1216104 PURE FULL_SHARD False 1315950592
A100-40 1b 2048 32 45.39 10 1 320 497782 PURE FULL_SHARD False 1315950592
A100-40 1b 2048 16 55.69 8 1 128 305372 PURE FULL_SHARD False 1315950592
A100-40 1b 2048 8 56.23 8 8 512 154171 PURE FULL_SHARD False 1315950592
A100-40 1b 1024 8 57.02 16 8 1024 167677 PURE FULL_SHARD False 1313853440
A100-40 1b 512 8 57.1 32 8 2048 174256 PURE FULL_SHARD False 1312804864
A100-40 760m 32768 8 44.53 1 4 32 57464 PURE FULL_SHARD True 807656448
A100-40 760m 16384 8 53.26 1 4 32 111316 PURE FULL_SHARD False 782490624
A100-40 760m 8192 8 53.12 3 4 96 160853 PURE FULL_SHARD False 769907712
A100-40 760m 4096 8 53.0 6 4 192 206909 PURE FULL_SHARD False 763616256
A100-40 760m 2048 128 50.73 12 1 1536 3704382 PURE FULL_SHARD False 760470528
A100-40 760m 2048 64 51.44 12 1 768 1878030 PURE FULL_SHARD False 760470528
A100-40 760m 2048 32 51.97 12 1 384 948745 PURE FULL_SHARD False 760470528
A100-40 760m 2048 16 51.9 12 1 192 473723 PURE FULL_SHARD False 760470528
A100-40 760m 2048 8 52.89 12 4 384 241389 PURE FULL_SHARD False 760470528
A100-40 760m 1024 8 53.63 24 4 768 267376 PURE FULL_SHARD False 758897664
A100-40 760m 512 8 53.47 48 4 1536 279504 PURE FULL_SHARD False 758111232
A100-40 350m 32768 8 51.55 1 4 32 107329 PURE FULL_SHARD False 387442688
A100-40 350m 16384 8 51.78 2 4 64 183175 PURE FULL_SHARD False 370665472
A100-40 350m 8192 8 51.39 4 4 128 279466 PURE FULL_SHARD False 362276864
A100-40 350m 4096 8 50.38 8 4 256 374670 PURE FULL_SHARD False 358082560
A100-40 350m 2048 128 45.61 18 1 2304 6647647 PURE FULL_SHARD False 355985408
A100-40 350m 2048 64 46.27 18 1 1152 3372118 PURE FULL_SHARD False 355985408
A100-40 350m 2048 32 47.26 18 1 576 1721978 PURE FULL_SHARD False 355985408
A100-40 350m 2048 16 48.66 18 1 288 886622 PURE FULL_SHARD False 355985408
A100-40 350m 2048 8 49.17 16 4 512 447963 PURE FULL_SHARD False 355985408
A100-40 350m 1024 8 48.73 32 4 1024 500184 PURE FULL_SHARD False 354936832
A100-40 350m 512 8 48.39 64 4 2048 530277 PURE FULL_SHARD False 354412544
A100-40 125m 32768 8 47.27 1 4 32 261208 PURE FULL_SHARD False 148904448
A100-40 125m 16384 8 46.77 2 3 48 443876 PURE FULL_SHARD False 136321536
A100-40 125m 8192 8 46.94 5 3 120 694868 PURE FULL_SHARD False 130030080
A100-40 125m 4096 8 44.82 13 3 312 921297 PURE FULL_SHARD False 126884352
A100-40 125m 2048 128 38.86 26 1 3328 15863837 PURE FULL_SHARD False 125311488
A100-40 125m 2048 64 39.27 26 1 1664 8015010 PURE FULL_SHARD False 125311488
A100-40 125m 2048 32 39.86 26 1 832 4067922 PURE FULL_SHARD False 125311488
A100-40 125m 2048 16 40.93 26 1 416 2088560 PURE FULL_SHARD False 125311488
A100-40 125m 2048 8 42.75 26 3 624 1090678 PURE FULL_SHARD False 125311488
A100-40 125m 1024 8 40.89 52 3 1248 1186314 PURE FULL_SHARD False 124525056
A100-40 125m 512 8 40.26 104 3 2496 1253886 PURE FULL_SHARD False 124131840
"""


def load_runs():
    """The RUNS table as dicts."""
    runs = []
    for line in RUNS.strip().splitlines():
        t = line.split()
        runs.append({
            "table": t[0], "model": t[1], "seq": int(t[2]), "gpus": int(t[3]), "mfu": float(t[4]),
            "mbs": int(t[5]), "accum": int(t[6]), "gbs": int(t[7]), "tps": int(t[8]), "mp": t[9],
            "shard": t[10], "ckpt": t[11] == "True", "params": int(t[12]),
        })
    return runs


def params_of(model, seq):
    """MPTConfig's defaults: 12h^2 + 13h a layer (linear and LayerNorm biases), the tied
    embedding, learned positions of the sequence length and the final LayerNorm."""
    h, layers, _ = SHAPES[model]
    return layers * (12 * h * h + 13 * h) + VOCAB * h + seq * h + 2 * h


def model_json(model, seq, path):
    h, layers, heads = SHAPES[model]
    m = {
        "name": "MPT-" + model, "num_layers": layers, "hidden_size": h, "ffn_hidden_size": 4 * h,
        "num_attention_heads": heads, "num_query_groups": heads, "kv_channels": h // heads,
        "vocab_size": VOCAB, "seq_length": seq, "max_position_embeddings": seq,
        "normalization": "layernorm", "activation": "gelu", "position_embedding": "learned",
        "tie_embeddings": True, "dropout": False,
        "source": "MPT as llm-foundry's yamls/pretrain (495218376) build it",
    }
    with open(path, "w") as f:
        json.dump(m, f)


def simulate(binary, run, tmp):
    path = os.path.join(tmp, f"mpt-{run['model']}-{run['seq']}.json")
    model_json(run["model"], run["seq"], path)
    cluster = CLUSTERS[run["table"]]
    cmd = [binary, "simulate", "--model", path, "--cluster", cluster, "--gpus", str(run["gpus"]),
           "--tp", "1", "--pp", "1", "--mbs", str(run["mbs"]), "--gbs", str(run["gbs"]),
           "--recompute", "full" if run["ckpt"] else "none",
           "--zero", "3" if run["shard"] == "FULL_SHARD" else "2", "--optimizer", "fsdp",
           "--cross-entropy", "flash-attn", "--attention-kernel", "fa2", "--json"]
    if run["mp"] == "PURE":
        cmd.append("--bf16-main-grads")
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        return None, out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "exit %d" % out.returncode
    try:
        d = json.loads(out.stdout)
    except json.JSONDecodeError:
        return None, f"{binary} did not print simulate's JSON"
    if not d.get("feasible", True):
        return None, "infeasible"
    return d["step_time_s"], "" if d.get("fits", True) else "predicted not to fit"


def main():
    args = sys.argv[1:]
    csv_path = None
    if "--csv" in args:
        i = args.index("--csv")
        if i + 1 >= len(args):
            print("llm-foundry-crosscheck: --csv needs a file name", file=sys.stderr)
            sys.exit(2)
        csv_path = args[i + 1]
        del args[i:i + 2]
        if not os.path.isdir(os.path.dirname(os.path.abspath(csv_path))):
            print(f"llm-foundry-crosscheck: --csv {csv_path}: no such folder", file=sys.stderr)
            sys.exit(2)
    binary = os.path.abspath(args[0] if args else "build/cli/shardcast")
    if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
        print(f"llm-foundry-crosscheck: {binary}: not an executable shardcast binary (build it, or give its path)",
              file=sys.stderr)
        sys.exit(2)
    runs = load_runs()
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in runs:
            if r["gbs"] != r["gpus"] * r["mbs"] * r["accum"]:
                continue  # Composer's uneven micro-batches: not one shardcast configuration
            if params_of(r["model"], r["seq"]) != r["params"]:
                print(f"warning: {r['table']} {r['model']} seq {r['seq']}: NumParams {r['params']} is not "
                      f"{params_of(r['model'], r['seq'])}", file=sys.stderr)
            measured = r["gbs"] * r["seq"] / r["tps"]
            predicted, why = simulate(binary, r, tmp)
            row = dict(r, measured_s=measured, predicted_s=predicted, note=why)
            if predicted is not None:
                layers = SHAPES[r["model"]][1]
                row["error"] = predicted / measured - 1
                row["extra_ms_per_layer"] = 1e3 * (measured - predicted) / (layers * r["accum"])
            lines.append(row)
    print(f"{'table':8} {'model':5} {'seq':>6} {'GPUs':>5} {'mbs':>4} {'acc':>4} {'ckpt':5} {'shard':13} "
          f"{'measured':>9} {'predicted':>9} {'error':>7} {'extra/layer':>11}")
    for x in lines:
        if x["predicted_s"] is None:
            print(f"{x['table']:8} {x['model']:5} {x['seq']:6} {x['gpus']:5} {x['mbs']:4} {x['accum']:4} "
                  f"{str(x['ckpt']):5} {x['shard']:13} {x['measured_s']:9.3f} {'-':>9}   {x['note']}")
            continue
        print(f"{x['table']:8} {x['model']:5} {x['seq']:6} {x['gpus']:5} {x['mbs']:4} {x['accum']:4} "
              f"{str(x['ckpt']):5} {x['shard']:13} {x['measured_s']:9.3f} {x['predicted_s']:9.3f} "
              f"{100 * x['error']:+6.1f}% {x['extra_ms_per_layer']:9.1f} ms {x['note']}")
    summarize(lines)
    if csv_path:
        keys = ["table", "model", "seq", "gpus", "mbs", "accum", "gbs", "mp", "shard", "ckpt", "params",
                "measured_s", "predicted_s", "error", "extra_ms_per_layer", "note"]
        fd, tmp_path = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(csv_path)), suffix=".tmp")
        try:
            with os.fdopen(fd, "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
                w.writeheader()
                w.writerows(lines)
            os.replace(tmp_path, csv_path)
        finally:
            if os.path.exists(tmp_path):
                os.remove(tmp_path)
    if any(x["predicted_s"] is None for x in lines):
        sys.exit(1)


def summarize(lines):
    """Mean absolute and mean signed error by table and checkpointing, and by sequence length."""
    done = [x for x in lines if x["predicted_s"] is not None]

    def line(label, xs):
        if not xs:
            return
        mape = sum(abs(x["error"]) for x in xs) / len(xs)
        bias = sum(x["error"] for x in xs) / len(xs)
        lo, hi = min(x["error"] for x in xs), max(x["error"] for x in xs)
        print(f"  {label:40} {len(xs):3} runs  MAPE {100 * mape:5.1f}%  mean {100 * bias:+6.1f}%  "
              f"range {100 * lo:+6.1f}% .. {100 * hi:+6.1f}%")

    print("\nSummary (error = predicted / measured - 1)")
    for table in CLUSTERS:
        print(f" {table} ({CLUSTERS[table]}; attention: {ATTENTION[table]})")
        for ckpt in (True, False):
            for lo, hi in ((0, 2048), (2049, 1 << 20)):
                line(f"{'with' if ckpt else 'without'} checkpointing, seq {lo}-{hi}",
                     [x for x in done if x["table"] == table and x["ckpt"] == ckpt and lo <= x["seq"] <= hi])


if __name__ == "__main__":
    main()
