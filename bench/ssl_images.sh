#!/bin/sh
# Figure 1 of paper e on digits (docs/ssl.md, "Images"): 3 methods x 3 labelled proportions x 3 seeds,
# plus supervised on 100 % of the labels; one thread, niced; cached per cell, so a rerun skips
# finished cells and resumes an interrupted one. Writes OUT/figure1.md and OUT/figure1.png.
#   bench/ssl_images.sh [OUT]        (default runs/ssl_images; bench/results/ssl_images holds the reported ones)
set -e
OUT=${1:-runs/ssl_images}
cd "$(dirname "$0")/.."
OMP_NUM_THREADS=1 PYTHONPATH=$PWD/src nice -n 10 ${PYTHON:-python} bench/ssl_images.py --out "$OUT" \
    --proportions 0.02 0.05 0.1 --seeds 3 --steps 400 --threads 1
