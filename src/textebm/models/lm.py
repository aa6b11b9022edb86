"""Causal LMs as plain Hugging Face folders plus `textebm_lm.json`: meta, special tokens, save.

Any local HF causal-LM folder works as a model; `textebm_lm.json` (written by `lm train`) records
how textebm trained it: objective (causal / infill), direction (l2r / r2l), mask ratio and the
special tokens of the sequence layouts in `textebm.models.lm_format`. A folder without it is treated as
a causal, left-to-right LM. Loading, with the checks of what a folder holds, is
`textebm.models.load.load_lm`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from textebm.errors import InputError, TextebmError
from textebm.io import read_json_object, write_json
from textebm.models.lm_format import SpecialIds

META_FILE = "textebm_lm.json"
MASK_TOKEN = "<mask>"
SEP_TOKEN = "<sep>"


@dataclass
class LMMeta:
    objective: str = "causal"  # causal | infill
    direction: str = "l2r"  # l2r | r2l
    mask_ratio: float | None = None  # infill only
    bos_token: str | None = None
    eos_token: str | None = None
    pad_token: str | None = None
    mask_token: str | None = None
    sep_token: str | None = None


def read_meta(path: str | Path) -> LMMeta:
    """The meta of an LM folder (defaults without `textebm_lm.json`); InputError naming the file
    when it is unreadable or says something textebm does not know."""
    f = Path(path) / META_FILE
    if not f.is_file():
        return LMMeta()

    raw = read_json_object(f, "LM description")
    known = {fl.name for fl in dataclasses.fields(LMMeta)}
    meta = LMMeta(**{k: v for k, v in raw.items() if k in known})
    if meta.objective not in ("causal", "infill") or meta.direction not in ("l2r", "r2l"):
        raise InputError(f, f"objective must be causal or infill and direction l2r or r2l, got "
                            f"{meta.objective!r} and {meta.direction!r}")
    return meta


def ensure_special_tokens(tokenizer, model=None, infill: bool = False) -> LMMeta:
    """Give the tokenizer bos/eos/pad (and mask/sep for infill) tokens, adding what is missing and
    resizing the model's embeddings to match. Returns the meta naming them."""
    add: dict = {}
    if tokenizer.eos_token is None:
        add["eos_token"] = "</s>"
    if tokenizer.bos_token is None:
        # SmolLM2's tokenizer has no BOS; reuse EOS as the start symbol, as GPT-2 does.
        tokenizer.bos_token = tokenizer.eos_token or "</s>"
    if tokenizer.pad_token is None:
        add["pad_token"] = "<pad>"
    extra = []
    if infill:
        vocab = tokenizer.get_vocab()
        for tok in (MASK_TOKEN, SEP_TOKEN):
            if tok not in vocab:
                extra.append(tok)
    if add:
        tokenizer.add_special_tokens(add)
    if extra:
        tokenizer.add_special_tokens({"additional_special_tokens": extra})
    if tokenizer.bos_token is None:
        tokenizer.bos_token = tokenizer.eos_token
    if model is not None and len(tokenizer) > model.get_input_embeddings().weight.shape[0]:
        model.resize_token_embeddings(len(tokenizer), mean_resizing=True)
    return LMMeta(bos_token=tokenizer.bos_token, eos_token=tokenizer.eos_token,
                  pad_token=tokenizer.pad_token,
                  mask_token=MASK_TOKEN if infill else None, sep_token=SEP_TOKEN if infill else None)


def special_ids(tokenizer, meta: LMMeta) -> SpecialIds:
    def tid(tok: str | None) -> int | None:
        return None if tok is None else tokenizer.convert_tokens_to_ids(tok)

    bos = tid(meta.bos_token or tokenizer.bos_token or tokenizer.eos_token)
    eos = tid(meta.eos_token or tokenizer.eos_token)
    pad = tid(meta.pad_token or tokenizer.pad_token) if (meta.pad_token or tokenizer.pad_token) else eos
    if bos is None or eos is None:
        raise TextebmError("the tokenizer has no BOS/EOS token; textebm needs one to delimit texts")
    return SpecialIds(bos=bos, eos=eos, pad=pad, mask=tid(meta.mask_token), sep=tid(meta.sep_token))


def cache_arg(model, cache) -> dict:
    """The key-value cache argument of a causal LM's forward: `cache` from transformers 5.24 on,
    `past_key_values` before."""
    import inspect

    return {"cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values": cache}


def save_lm(model, tokenizer, meta: LMMeta, path: str | Path) -> None:
    """Write the HF folder (safetensors) and the meta file (callers write into a temporary folder)."""

    from transformers.utils import logging as hf_logging

    path = Path(path)
    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # "Writing model shards": the command draws its own progress, or none
    try:
        model.save_pretrained(path, safe_serialization=True)
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()
    tokenizer.save_pretrained(path)
    write_json(path / META_FILE, dataclasses.asdict(meta))
