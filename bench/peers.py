"""The peers the benchmarks compare against, installed beside them, never into textebm's environment.

minicons (Misra 2022) is installed into bench/.minicons (`pip install --target`, no dependencies:
it runs on the torch and transformers already here) the first time a benchmark asks for it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

MINICONS = Path(__file__).resolve().parent / ".minicons"


def ensure_minicons() -> bool:
    """True when minicons is importable (installed now if missing); the folder goes on sys.path."""
    if not (MINICONS / "minicons").is_dir():
        r = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(MINICONS),
                            "minicons==0.3.39", "wonderwords"], capture_output=True, text=True)
        if r.returncode != 0:
            print("minicons could not be installed:", r.stderr[-500:])
            return False
    if str(MINICONS) not in sys.path:
        sys.path.insert(0, str(MINICONS))
    return True


def patch_tokenizer(mc) -> None:
    """minicons 0.3.39 calls batch_encode_plus, which transformers 5 removed; __call__ is its successor."""
    mc.tokenizer.batch_encode_plus = lambda *a, **k: mc.tokenizer(*a, **k)
