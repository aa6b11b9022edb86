"""The one place textebm loads models from, after checking what the folder holds.

A model argument (`--model`, `--encoder`, `--init`) is a local folder, a run folder of a training
command (its `model/` is used) or a `models fetch` id. What a folder is gets decided by what it
contains, never by its name (`inspect_folder`):

| kind | the folder holds |
|---|---|
| `classifier` | `classifier.json` (written by `classify train`) |
| `cloze` | `cloze.json` (written by `cloze train`: Electric, ELECTRA-TT, masked LM, TwoTower) |
| `residual-lm` | `residual_lm.json` (written by `lm train --residual-of`: a RALM, phi beside a frozen base LM; a causal LM wherever one is asked for) |
| `tagger` | `tagger.json` (a BiLSTM-CRF tagger of paper e, `models/crf.py`: `save_tagger`) |
| `image-net` | `convnet.json` (paper e's image network, a classifier or an EBM, `models/convnet.py`: `save_convnet`) |
| `causal-lm` | `config.json` whose `architectures` is a `...ForCausalLM` / `...LMHeadModel`, or no architectures and a decoder-only `model_type` |
| `encoder` | `config.json` of an encoder family (BERT, RoBERTa, ELECTRA, MPNet, ...: a `model_type` with a masked-LM head in transformers), whatever head it was saved with |
| `other` | any other Hugging Face model (e.g. a `LlamaModel` without its LM head) |
| `none` | no `config.json` |

`load_lm`, `load_encoder`, `load_classifier`, `load_cloze`, `load_energy`, `load_tagger` and `load_convnet` refuse a
folder of another kind with a `TextebmError` (exit 2) that names the folder, what it holds and what
was expected, before any weights are read; a folder whose weights are missing or do not fit its
config is refused too (transformers would otherwise fill the gaps with random layers and carry on).

Encoders lose their pooler: textebm pools the last hidden states itself (`textebm.energy.pool`),
and a pooler that gets no gradient breaks multi-process (DDP) training. Classes that take
`add_pooling_layer` (BERT, RoBERTa, XLM-R, MPNet) are built without it; a pooler of any other
class is frozen, so no trainable parameter is left without a gradient.
"""

from __future__ import annotations

import contextlib
import inspect
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import torch
from safetensors import SafetensorError

from textebm.assets import resolve_model
from textebm.checkpoint import load_weights
from textebm.errors import TextebmError
from textebm.fingerprint import folder_sha256
from textebm.io import read_json_object
from textebm.models import classifier, cloze, convnet, crf, ralm, seq_energy
from textebm.models.classifier import EBMClassifier
from textebm.models.cloze import ClozeModel
from textebm.models.kinds import ModelKind
from textebm.models.lm import ensure_special_tokens, read_meta
from textebm.models.mixed import mixed_precision
from textebm.models.seq_energy import build_energy
from textebm.outputs import read_marker

# Folders textebm writes, recognised by their marker file (each kind declared beside its model).
MARKED: dict[str, ModelKind] = {k.name: k for k in (classifier.KIND, cloze.KIND, seq_energy.KIND, ralm.KIND,
                                                    crf.KIND, convnet.KIND)}
CLASSIFIER, CLOZE, ENERGY, RESIDUAL_LM = classifier.KIND.name, cloze.KIND.name, seq_energy.KIND.name, ralm.KIND.name
TAGGER = crf.KIND.name
IMAGE_NET = convnet.KIND.name
CAUSAL_LM, ENCODER, OTHER, NONE = "causal-lm", "encoder", "other", "none"
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")
CAUSAL_SUFFIXES = ("ForCausalLM", "LMHeadModel")
# What a damaged folder raises while loading (a truncated safetensors file: SafetensorError).
LOAD_ERRORS = (OSError, ValueError, RuntimeError, SafetensorError)

# What each command needs, as said in its error message.
NEEDS = {
    CAUSAL_LM: "a causal LM (train one with `textebm lm train`, or use `smollm2-135m`)",
    ENCODER: "a pretrained text encoder (`minilm-l6`, `mpnet-base`, a BERT-like Hugging Face folder, or a "
             "masked LM trained with `textebm cloze train --objective mlm`)",
    **{k.name: k.needs for k in MARKED.values()},
}
NAMES = {CAUSAL_LM: "a causal LM", ENCODER: "an encoder", **{k.name: k.noun for k in MARKED.values()}}


@dataclass(frozen=True)
class FolderInfo:
    path: Path  # the folder the model lives in (RUN/model for a run folder)
    kind: str  # causal-lm | encoder | other | none | one of MARKED (classifier, cloze, energy)
    architecture: str  # config.json `architectures[0]`, or "" when it names none
    model_type: str  # config.json `model_type`, or ""
    run: Path | None = None  # the run folder `path` belongs to, when one was given

    def describe(self) -> str:
        """What the folder holds, for messages: "a BertModel encoder", "a textebm classifier ..."."""
        arch = self.architecture or (f"{self.model_type} model" if self.model_type else "model")
        if self.kind in MARKED:
            kind = MARKED[self.kind]
            return f"{kind.noun} ({arch} encoder)" if kind.shows_encoder else kind.noun
        if self.kind == CAUSAL_LM:
            return f"a {arch} causal LM"
        if self.kind == ENCODER:
            return f"a {arch} encoder"
        if self.kind == OTHER:
            return f"a {arch} (neither a causal LM with its head nor an encoder)"
        return "not a model folder (no config.json)"


def _model_families() -> tuple[set[str], set[str]]:
    """(model types with a causal-LM class, model types with a masked-LM class) in transformers."""
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    return set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES), set(MODEL_FOR_MASKED_LM_MAPPING_NAMES)


def read_config(path: Path) -> dict:
    """config.json of a model folder as a dict (InputError naming the file when unreadable)."""

    return read_json_object(path / "config.json", "model config")


def inspect_folder(path: str | Path) -> FolderInfo:
    """What the folder at `path` holds (see the module doc). A run folder (with `model/`) is
    described by its model."""
    path, run = Path(path), None
    if ((path / "model" / "config.json").is_file() or any((path / "model" / k.marker).is_file() for k in MARKED.values())
            or (not (path / "config.json").is_file() and (path / "model").is_dir())):
        path, run = path / "model", path  # a run folder: RUN/config.json is its training config
    elif path.name == "model" and _is_run(path.parent):
        run = path.parent  # RUN/model given directly: the run's settings (e.g. --limit) still apply
    marked = next((k for k in MARKED.values() if (path / k.marker).is_file()), None)
    if marked is not None and not marked.shows_encoder:
        return FolderInfo(path, marked.name, "", "", run)
    if not (path / "config.json").is_file():
        return FolderInfo(path, NONE, "", "", run)
    config = read_config(path)
    archs = config.get("architectures") or []
    arch = str(archs[0]) if isinstance(archs, list) and archs else ""
    model_type = str(config.get("model_type") or "")
    if marked is not None:
        return FolderInfo(path, marked.name, arch, model_type, run)
    causal, masked = _model_families()
    if arch.endswith(CAUSAL_SUFFIXES):
        kind = CAUSAL_LM
    elif model_type in masked:
        kind = ENCODER
    elif not arch and model_type in causal:
        kind = CAUSAL_LM
    else:
        kind = OTHER
    return FolderInfo(path, kind, arch, model_type, run)


def _is_run(folder: Path) -> bool:
    """A training run folder written by textebm (its output marker says a `... train` command)."""

    marker = read_marker(folder)
    return marker is not None and marker["kind"].endswith("train") and (folder / "config.json").is_file()


def refuse_unfinished(path: Path, option: str) -> None:
    """A training run killed before it wrote model/ is named as such (not as a wrong kind)."""
    if _is_run(path) and not (path / "model").exists():
        raise TextebmError(f"{option} {path}: an unfinished `{read_marker(path)['kind']}` run (no model/ yet); "
                           "finish it with the same command and --resume, then use it")


def folder_kind(path: str | Path) -> str:
    """causal-lm | encoder | other | none | a textebm kind (see the module doc)."""
    return inspect_folder(path).kind


def find_model(name_or_path: str | Path, kind: str, option: str = "--model", ids: bool = True,
               also: tuple[str, ...] = ()) -> FolderInfo:
    """The folder of a model argument, checked to be of `kind` (or one of the kinds `also` names),
    before anything is loaded.

    `name_or_path`: a folder, a run folder holding `model/`, or (with `ids`) a `models fetch` id.
    Raises TextebmError naming the folder, what it holds and what was expected."""
    path = Path(name_or_path).expanduser()
    if not path.is_dir():
        if not ids:
            raise TextebmError(f"{option} {name_or_path}: no such folder; expected {NEEDS[kind]}")

        try:
            path = resolve_model(name_or_path)
        except TextebmError as e:
            raise TextebmError(f"{option}: {str(e).rstrip('.')}; expected {NEEDS[kind]}") from None
    refuse_unfinished(path, option)
    info = inspect_folder(path)
    if info.kind != kind and info.kind not in also and not (kind == CAUSAL_LM and info.kind == RESIDUAL_LM):
        # (a RALM is a causal LM)
        found = info.describe() if info.kind == NONE else f"{info.describe()}, not {NAMES[kind]}"
        raise TextebmError(f"{option} {info.path}: {found}; expected {NEEDS[kind]}")
    if info.kind in MARKED:
        if not (info.path / "model.safetensors").is_file():
            raise TextebmError(f"{option} {info.path}: no model.safetensors ({NAMES[kind]}'s weights); "
                               "the folder is incomplete")
    elif not any((info.path / f).is_file() for f in WEIGHT_FILES):
        raise TextebmError(f"{option} {info.path}: no model weights (model.safetensors); the folder holds "
                           "a config only, or was copied incompletely")
    return info


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    """Silence transformers' load reports (e.g. the dropped pooler's "UNEXPECTED keys"): textebm
    checks the loading info itself."""
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        hf_logging.enable_progress_bar()


def _load_error(option: str, path: Path, e: Exception) -> TextebmError:
    """The first line of the cause that says something (torch's "Error(s) in loading state_dict for
    X:" says what follows on its next line), at most 300 characters."""
    lines = [x.strip() for x in str(e).splitlines() if x.strip()]
    what = " ".join(lines[:2]) if lines and lines[0].endswith(":") else (lines[0] if lines else type(e).__name__)
    return TextebmError(f"{option} {path}: cannot load the model: {what[:300]}")


def _check_loading_info(option: str, path: Path, info: dict, ignore: tuple[str, ...] = ()) -> None:
    missing = sorted(k for k in info.get("missing_keys", ()) if not k.startswith(ignore))
    if missing:
        raise TextebmError(f"{option} {path}: its weights do not fit its config.json (missing "
                           f"{', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}); loading it "
                           "would leave those layers random")


def load_tokenizer(path: str | Path, option: str = "--tokenizer"):
    """A tokenizer from a local folder, or from a run folder's model/ (the tokenizer a model was
    trained with); a missing or broken folder is a TextebmError naming it."""
    path = Path(path).expanduser()
    if not path.is_dir():
        raise TextebmError(f"{option} {path}: no such folder; expected a tokenizer folder "
                           "(`textebm tokenizer train` writes one)")
    if not _has_tokenizer(path) and _has_tokenizer(path / "model"):
        path = path / "model"  # RUN given for RUN/model, as --generator and --init take it
    return _tokenizer(option, path)


def _has_tokenizer(path: Path) -> bool:
    if not path.is_dir():
        return False
    if any((path / f).is_file() for f in TOKENIZER_FILES) or any(
            f.suffix in TOKENIZER_SUFFIXES and f.is_file() for f in path.iterdir()):
        return True
    try:  # a byte- or character-level tokenizer has no vocabulary file, only its config
        config = json.loads((path / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and config.get("tokenizer_class") in VOCABULARY_FREE


VOCABULARY_FREE = ("ByT5Tokenizer", "CanineTokenizer")  # tokenizers whose vocabulary is built in


# A folder holds its tokenizer's vocabulary in one of these (fast, WordPiece, BPE, SentencePiece,
# tiktoken); without one, AutoTokenizer builds a placeholder of its special tokens that maps every
# word to [UNK] and every text to the same ids.
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json")
TOKENIZER_SUFFIXES = (".model", ".tiktoken")


def _tokenizer(option: str, path: Path):
    from transformers import AutoTokenizer

    if not _has_tokenizer(path):
        raise TextebmError(f"{option} {path}: no tokenizer in the folder (none of {', '.join(TOKENIZER_FILES)} or a "
                           f"*{' / *'.join(TOKENIZER_SUFFIXES)} file); a model folder keeps its tokenizer beside its "
                           "weights, as textebm writes it")
    try:
        return AutoTokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError) as e:
        why = " ".join(str(e).split()) or type(e).__name__  # transformers' messages run over several lines
        raise TextebmError(f"{option} {path}: cannot load its tokenizer: {why[:400]}") from None


def _place(model: torch.nn.Module, dtype: torch.dtype | None, device: str | torch.device | None):
    """`model` on `device`; in bf16 or fp16 by `mixed_precision` (products in the low precision,
    the residual stream, norms, softmax and output layer in fp32), never cast whole."""
    if dtype is not None:  # converted where it was loaded (the CPU), then moved: a GPU never holds the fp32 copy
        target = torch.device(device) if device is not None else next(model.parameters()).device
        model = mixed_precision(model, dtype, device=target.type)
    if device is not None:
        model = model.to(device=device)
    return model


# ---------------------------------------------------------------- causal LMs


def load_lm(name_or_path: str | Path, dtype: torch.dtype = torch.float32,
            device: str | torch.device | None = None, option: str = "--model"):
    """(model, tokenizer, meta) of a causal LM, in eval mode, from a folder, a run folder
    (RUN/model) or a `models fetch` id; never from a hub. `meta` (`textebm.models.lm.LMMeta`)
    says how textebm trained it (a folder without `textebm_lm.json`: causal, left to right)."""
    import dataclasses

    info = find_model(name_or_path, CAUSAL_LM, option)
    if info.kind == RESIDUAL_LM:
        return _load_residual_lm(info.path, dtype, device, option)
    path = info.path
    meta = read_meta(path)
    tokenizer = _tokenizer(option, path)
    model = _causal_weights(path, dtype, option)
    if meta.bos_token is None:
        meta = dataclasses.replace(ensure_special_tokens(tokenizer, model, infill=False),
                                   objective=meta.objective, direction=meta.direction)
    model = _place(model, dtype, device)
    model.eval()
    return model, tokenizer, meta


def _causal_weights(path: Path, dtype: torch.dtype, option: str):
    """The Hugging Face causal LM of `path`, every weight accounted for."""
    from transformers import AutoModelForCausalLM

    import textebm.models.gcnn  # noqa: F401  registers textebm's gated convolutional LM type

    try:
        with _quiet_transformers():
            # fp32 whatever `dtype`: _place makes the bf16 model from the fp32 weights
            model, info = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, local_files_only=True,
                                                               output_loading_info=True)
    except LOAD_ERRORS as e:
        raise _load_error(option, path, e) from None
    _check_loading_info(option, path, info)
    return model


def _load_residual_lm(path: Path, dtype: torch.dtype, device, option: str):
    """(ResidualLM, tokenizer, meta) of a folder written by `lm train --residual-of`: phi from the
    folder, the base from the path `residual_lm.json` records, refused when it is gone or its
    content changed since phi was trained on it."""
    spec_file = path / ralm.SPEC_FILE
    ref = ralm.spec_from_dict(read_json_object(spec_file, "residual LM description"), spec_file)
    base_path = Path(ref.base)
    if not base_path.is_dir():
        raise TextebmError(f"{spec_file}: its base LM {base_path} is gone; a RALM is only defined with "
                           "the base it was trained on")
    if folder_sha256(base_path) != ref.base_sha256:
        raise TextebmError(f"{spec_file}: its base LM {base_path} changed since phi was trained on it "
                           "(another content hash); retrain the RALM on this base")
    base, _, _ = load_lm(base_path, dtype, device, option=f"{spec_file} base")
    meta = read_meta(path)
    tokenizer = _tokenizer(option, path)
    phi = _place(_causal_weights(path, dtype, option), dtype, device)
    try:
        model = ralm.ResidualLM(base, phi, ref)
    except ValueError as e:
        raise TextebmError(f"{option} {path}: {e}") from None
    model.eval()
    return model, tokenizer, meta


# ---------------------------------------------------------------- encoders and classifiers


def _model_class(config):
    from transformers import AutoModel

    try:
        return AutoModel._model_mapping[type(config)]
    except KeyError:
        return None


def _without_pooler(config) -> dict:
    """Constructor arguments that build the encoder of `config` without its pooler, where its
    class takes them (BERT, RoBERTa, XLM-R, MPNet; ELECTRA has no pooler and no such argument)."""
    cls = _model_class(config)
    if cls is not None and "add_pooling_layer" in inspect.signature(cls.__init__).parameters:
        return {"add_pooling_layer": False}
    return {}


def _freeze_pooler(encoder: torch.nn.Module) -> torch.nn.Module:
    """A pooler that survived (a class without `add_pooling_layer`) gets no gradient: freeze it."""
    pooler = getattr(encoder, "pooler", None)
    if isinstance(pooler, torch.nn.Module):
        pooler.requires_grad_(False)
    return encoder


def load_encoder(name_or_path: str | Path, dtype: torch.dtype = torch.float32, option: str = "--encoder"):
    """(encoder, tokenizer): a pretrained text encoder (`AutoModel`) without its pooler, or the
    encoder of a cloze model trained here (`cloze train --objective mlm|electric|electra`): paper
    d's BiT starts from a masked LM trained on the same corpus."""
    from transformers import AutoConfig, AutoModel

    info = find_model(name_or_path, ENCODER, option, also=(CLOZE,))
    path = info.path
    if info.kind == CLOZE:
        model, tokenizer = _cloze_at(path, dtype, None, option)
        if model.encoder is None:
            raise TextebmError(f"{option} {name_or_path}: a two-tower cloze model has no encoder; expected "
                               f"{NEEDS[ENCODER]}")
        return model.encoder, tokenizer
    tokenizer = _tokenizer(option, path)
    try:
        config = AutoConfig.from_pretrained(path, local_files_only=True)
        with _quiet_transformers():
            enc, info = AutoModel.from_pretrained(path, dtype=dtype, local_files_only=True,
                                                  output_loading_info=True, **_without_pooler(config))
    except LOAD_ERRORS as e:
        raise _load_error(option, path, e) from None
    _check_loading_info(option, path, info, ignore=("pooler.",))
    return _freeze_pooler(enc), tokenizer


def encoder_from_config(config) -> torch.nn.Module:
    """An untrained encoder for `config`, without its pooler (the shape a classifier saved)."""
    from transformers import AutoModel

    return _freeze_pooler(AutoModel.from_config(config, **_without_pooler(config)))


def load_classifier(name_or_path: str | Path, dtype: torch.dtype | None = None,
                    device: str | torch.device | None = None, option: str = "--model"):
    """(EBMClassifier, tokenizer) in eval mode from a folder written by `classify train` (RUN or
    RUN/model). Checks `classifier.json` field by field (InputError naming the file)."""
    from transformers import AutoConfig

    path = find_model(name_or_path, CLASSIFIER, option, ids=False).path
    spec_file = path / classifier.SPEC_FILE

    spec = classifier.spec_from_dict(read_json_object(spec_file, "classifier description"), spec_file)
    tokenizer = _tokenizer(option, path)
    weights = path / "model.safetensors"
    try:
        config = AutoConfig.from_pretrained(path, local_files_only=True)
        with _quiet_transformers():
            model = EBMClassifier(encoder_from_config(config), spec)
    except LOAD_ERRORS as e:
        raise _load_error(option, path, e) from None
    # "encoder.pooler.": saved before poolers were dropped
    return (_with_weights(model, weights, option, classifier.SPEC_FILE, dtype, device, ignore=("encoder.pooler.",)),
            tokenizer)


def _with_weights(model: torch.nn.Module, weights: Path, option: str, spec_file: str, dtype, device,
                  ignore: tuple[str, ...] = ()) -> torch.nn.Module:
    """`model` with the weights of `weights`, every tensor accounted for (tied ones aside), placed
    and in eval mode; a file that does not fit is a TextebmError naming it."""
    try:
        missing, unexpected = load_weights(model, weights)
    except LOAD_ERRORS as e:
        raise _load_error(option, weights.parent, e) from None
    unexpected = [k for k in unexpected if not k.startswith(ignore)] if ignore else list(unexpected)
    if missing or unexpected:
        raise TextebmError(f"{option} {weights.parent}: {weights.name} does not fit {spec_file} and config.json "
                           f"(missing {missing[:3]}, unexpected {unexpected[:3]})")
    model = _place(model, dtype, device)
    model.eval()
    return model


def build_classifier(encoder_path: str | Path, spec):
    """(EBMClassifier, tokenizer) for a `ClassifierSpec` from a pretrained encoder (HF folder or
    models-fetch id), its pooler dropped (`load_encoder`)."""

    enc, tok = load_encoder(encoder_path)
    return EBMClassifier(enc, spec), tok


def load_cloze(name_or_path: str | Path, dtype: torch.dtype | None = None,
               device: str | torch.device | None = None, option: str = "--model"):
    """(ClozeModel, tokenizer) in eval mode from a folder written by `cloze train` (RUN or
    RUN/model). Checks `cloze.json` field by field (InputError naming the file)."""
    return _cloze_at(find_model(name_or_path, CLOZE, option, ids=False).path, dtype, device, option)


def _cloze_at(path: Path, dtype: torch.dtype | None, device: str | torch.device | None, option: str):
    """`load_cloze` of a folder `find_model` checked."""
    from transformers import AutoConfig

    spec_file = path / cloze.SPEC_FILE
    spec = cloze.spec_from_dict(read_json_object(spec_file, "cloze model description"), spec_file)
    tokenizer = _tokenizer(option, path)
    weights = path / "model.safetensors"
    try:
        encoder = None
        if spec.objective != "twotower":
            encoder = encoder_from_config(AutoConfig.from_pretrained(path, local_files_only=True))
        with _quiet_transformers():
            model = ClozeModel(encoder, spec)
    except LOAD_ERRORS as e:
        raise _load_error(option, path, e) from None
    return _with_weights(model, weights, option, cloze.SPEC_FILE, dtype, device), tokenizer


def load_energy(name_or_path: str | Path, dtype: torch.dtype | None = None,
                device: str | torch.device | None = None, option: str = "--model"):
    """(energy module, EnergySpec, input tokenizer, shared vocabulary) in eval mode from a folder
    written by `detect train` (RUN or RUN/model). The vocabulary is the input tokenizer itself
    unless the energy re-tokenises (then vocab/). An lmstats energy's base LM is rebuilt from its
    config.json and stays fp32 whatever `dtype` (`LMStatsEnergy.FP32_MODULES`)."""
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

    import textebm.models.gcnn  # noqa: F401  registers textebm's gated convolutional LM type (an lmstats base)

    path = find_model(name_or_path, ENERGY, option, ids=False).path
    spec_file = path / seq_energy.SPEC_FILE
    spec = seq_energy.spec_from_dict(read_json_object(spec_file, "energy description"), spec_file)
    tokenizer = _tokenizer(option, path)
    vocab = _tokenizer(option, path / "vocab") if spec.retokenize else tokenizer
    try:
        body = None
        if spec.kind == "unitransf":
            body = AutoModel.from_config(AutoConfig.from_pretrained(path, local_files_only=True))
        elif spec.kind == "bitransf":
            body = encoder_from_config(AutoConfig.from_pretrained(path, local_files_only=True))
        elif spec.kind == "lmstats":
            body = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path, local_files_only=True))
        with _quiet_transformers():
            model = build_energy(spec, body)
    except LOAD_ERRORS as e:
        raise _load_error(option, path, e) from None
    model = _with_weights(model, path / "model.safetensors", option, seq_energy.SPEC_FILE, dtype, device)
    return model, spec, tokenizer, vocab


def load_tagger(name_or_path: str | Path, dtype: torch.dtype | None = None,
                device: str | torch.device | None = None, option: str = "--model") -> crf.BiLSTMCRF:
    """The BiLSTM-CRF tagger (models/crf.py) in eval mode from a folder written by `save_tagger`
    (RUN or RUN/model). Checks `tagger.json` field by field (InputError naming the file)."""
    path = find_model(name_or_path, TAGGER, option, ids=False).path
    spec_file = path / crf.SPEC_FILE
    spec = crf.spec_from_dict(read_json_object(spec_file, "tagger description"), spec_file)
    model = crf.BiLSTMCRF(spec)
    return _with_weights(model, path / "model.safetensors", option, crf.SPEC_FILE, dtype, device)


def load_convnet(name_or_path: str | Path, dtype: torch.dtype | None = None,
                 device: str | torch.device | None = None, option: str = "--model") -> convnet.ConvNet:
    """Paper e's image network (models/convnet.py) in eval mode from a folder written by
    `save_convnet` (RUN or RUN/model). Checks `convnet.json` field by field (InputError naming the file)."""
    path = find_model(name_or_path, IMAGE_NET, option, ids=False).path
    spec_file = path / convnet.SPEC_FILE
    spec = convnet.spec_from_dict(read_json_object(spec_file, "image network description"), spec_file)
    model = convnet.ConvNet(spec)
    return _with_weights(model, path / "model.safetensors", option, convnet.SPEC_FILE, dtype, device)
