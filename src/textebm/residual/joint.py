"""The joint model of Deng et al. (2020), eq. 2, over a frozen base LM and a sequence energy:

    P(x_{p+1..T} | x_{1..p}) = P_LM(x_{p+1..T} | x_{1..p}) exp(−E(x_{1..T})) / Z(x_{1..p})

`BaseLM` is the base LM as every part of paper d uses it, ONE distribution everywhere (the
training negatives of `negatives generate --top-k 0`, the samples behind log Z, the test tokens'
log P_LM, the baselines' perplexities): a causal LM in the shared vocabulary read left to right,
given `[bos] x_1..x_p`, writing exactly T − p tokens with [eos] and the layout symbols banned
and the other tokens renormalised (a continuation of fixed length never ends early). Its
samples come from textebm's one sampler (`textebm.lm.generate.generate`), each seeded by its own
generator, so a sample never depends on the batch it was drawn in; its log-probabilities from the
one next-token routine (`textebm.lm.scoring.next_token_logprobs`, banned tokens out, float64).

`JointEnergy` is E(x_{1..T}) over whole windows (prefix and continuation together, as
`detect train` scored them). For a causal energy (UniT) the prefix's states are the same for
every continuation of a prefix: `continuation_energies` runs the prefix once and only the
continuations after it (the key-value cache), which is what makes joint sampling cheap. Its
equivalence to the full pass is tested.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from textebm.data.layout import input_sha256
from textebm.detection.detect import energies as window_energies
from textebm.energy import fp32_linear
from textebm.errors import TextebmError
from textebm.fingerprint import folder_sha256
from textebm.io import iter_jsonl, read_json_object
from textebm.lm.generate import Generation, fixed_length_banned, generate
from textebm.lm.scoring import next_token_logprobs
from textebm.models.lm import cache_arg, special_ids
from textebm.models.load import load_energy, load_lm
from textebm.precision import fp32_or_better
from textebm.tokenizer import same_vocab

__all__ = ["BaseLM", "JointEnergy", "Names", "check_negatives", "energy_shape", "load_joint"]

log = logging.getLogger(__name__)


class BaseLM:
    """P_LM of paper d (see the module doc). `name` is how errors call the model (an option)."""

    def __init__(self, model, tokenizer, meta, vocab=None, name: str = "--base"):
        if meta.objective != "causal":
            raise TextebmError(f"{name}: the base LM must be a causal LM, not an {meta.objective} one")
        if meta.direction != "l2r":
            raise TextebmError(f"{name}: the base LM must read left to right; this one was trained r2l")
        if vocab is not None and not same_vocab(tokenizer, vocab):
            raise TextebmError(f"{name}: the base LM's vocabulary differs from the energy's; the joint model "
                               "needs both in one vocabulary (train the LM with `lm train --tokenizer VOCAB`)")
        self.model, self.tokenizer, self.name = model, tokenizer, name
        self.sp = special_ids(tokenizer, meta)
        self.banned = fixed_length_banned(self.sp)
        self.vocab_size = int(model.config.vocab_size)
        self.max_positions = getattr(model.config, "max_position_embeddings", None)
        self.device = next(model.parameters()).device

    def context(self, prefix: Sequence[int]) -> list[int]:
        """The model input that precedes the continuation: [bos] x_1..x_p."""
        return [self.sp.bos, *prefix]

    def check_length(self, prefix_len: int, cont_len: int, option: str = "--prefix") -> None:
        """A window of [bos] + prefix + continuation must fit the base LM's positions."""
        if self.max_positions and 1 + prefix_len + cont_len > self.max_positions:
            raise TextebmError(f"{option} {prefix_len} + {cont_len} generated tokens (and [bos]) exceed the "
                               f"{self.max_positions} positions of {self.name}")

    def sample(self, contexts: Sequence[Sequence[int]], length: int, seeds: Sequence[int], top_k: int = 0,
               batch_size: int = 64, temperature: float = 1.0) -> list[Generation]:
        """One continuation of exactly `length` tokens per context (the module doc's P_LM; `top_k` 0:
        untruncated), row i drawn from a generator seeded by `seeds[i]`; `batch_size` rows at a time."""
        out: list[Generation] = []
        k = top_k or self.vocab_size
        for s in range(0, len(contexts), batch_size):
            ctx = [list(c) for c in contexts[s:s + batch_size]]
            gens = [torch.Generator().manual_seed(int(x)) for x in seeds[s:s + batch_size]]
            out.extend(generate(self.model, ctx, [length] * len(ctx), gens, self.sp.eos, self.sp.pad, k,
                                temperature, self.banned))
        return out

    @torch.inference_mode()
    def next_logprobs(self, contexts: Sequence[Sequence[int]], batch_size: int = 64) -> torch.Tensor:
        """log P_LM(v | context) for every token v, banned tokens at −inf: (N, V) float64, rows in
        input order (contexts of one length per call keep it simple: they are right-aligned)."""
        rows = []
        for s in range(0, len(contexts), batch_size):
            ids = torch.tensor([list(c) for c in contexts[s:s + batch_size]], device=self.device)  # (B, P)
            logits = self.model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False,
                                logits_to_keep=1).logits[:, -1]  # (B, V)
            rows.append(self._log_softmax(logits))
        return torch.cat(rows)  # (N, V)

    def _log_softmax(self, logits: torch.Tensor) -> torch.Tensor:
        lg = logits.double()  # (..., V)
        lg[..., list(self.banned)] = float("-inf")
        return lg.log_softmax(-1).cpu()

    @torch.inference_mode()
    def continuation_logprobs(self, prefixes: Sequence[Sequence[int]], continuations: Sequence[Sequence[int]],
                              batch_size: int = 32) -> np.ndarray:
        """log P_LM(x_t | x_<t) of each continuation token (N, m) float64, under the module doc's P_LM.
        Prefixes share one length, continuations another. A banned token in a continuation is an
        error (its probability is 0 under P_LM)."""
        out = []
        for s in range(0, len(prefixes), batch_size):
            seqs = [self.context(p) + list(c) for p, c in zip(prefixes[s:s + batch_size], continuations[s:s + batch_size])]
            m = len(continuations[s])
            ids = torch.tensor(seqs, device=self.device)  # (B, 1+p+m)
            logits = self.model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False).logits
            tail = ids[:, -m - 1:]  # (B, m+1): the last context token and the continuation it predicts
            lp = next_token_logprobs(logits[:, -m - 1:], tail, torch.ones_like(tail), self.banned,
                                     torch.float64)  # (B, m)
            out.append(lp.cpu().numpy())
        res = np.concatenate(out) if out else np.zeros((0, 0))
        if not np.all(np.isfinite(res)):
            raise TextebmError(f"a continuation holds a token that {self.name} never writes ([eos] or a layout "
                               "symbol); windows of running text have none")
        return res


@dataclass
class JointEnergy:
    """E(x_{1..T}) of whole windows in the shared vocabulary (a `detect train` energy)."""

    model: torch.nn.Module
    spec: object  # EnergySpec
    tokenizer: object
    vocab: object

    @property
    def cached(self) -> bool:
        """Whether continuations of one prefix share the prefix's pass (a causal energy, UniT)."""
        return self.spec.kind == "unitransf" and not self.spec.retokenize

    def energies(self, windows: Sequence[Sequence[int]], batch_size: int = 64) -> np.ndarray:
        """E of each window (N,) float64 (the slow path: every window read in full)."""
        return window_energies(self.model, self.spec, self.tokenizer, self.vocab, windows, batch_size)

    def continuation_energies(self, prefix: Sequence[int], continuations: Sequence[Sequence[int]],
                              batch_size: int = 64, use_cache: bool = True) -> np.ndarray:
        """E(prefix + c) for each continuation c (N,) float64; UniT runs the prefix once
        (`use_cache=False`: the slow reference that reads every window in full). A UniT pooled over
        the continuation caches only the prefix it was trained after: a longer `prefix` (eq. 5's
        x_<t, t past the prefix) has its extra tokens run with each continuation, since they are
        pooled; a shorter one is read in full."""
        if not (use_cache and self.cached) or not prefix:
            return self.energies([[*prefix, *c] for c in continuations], batch_size)
        cut = self.model.prefix_len if self.model.pool == "continuation" else len(prefix)
        if not 0 < cut <= len(prefix):
            return self.energies([[*prefix, *c] for c in continuations], batch_size)
        head, tail = list(prefix[:cut]), list(prefix[cut:])
        return _unit_energies(self.model, head, [tail + list(c) for c in continuations], batch_size)


# ---------------------------------------------------------------- loading the joint model


@dataclass(frozen=True)
class Names:
    """How messages name the joint model's settings: the commands' options (the defaults), or the
    Python API's arguments."""

    base: str = "--base"
    energy: str = "--energy"
    prefix_len: str = "--prefix-len"
    length: str = "--length"
    precision: str = "--precision"


def energy_shape(spec, energy_arg: str, prefix_len: int, length: int, names: Names = Names()) -> tuple[int, int]:
    """(p, m) from the settings (0: the energy's own) and what the energy was trained on;
    TextebmError naming the setting when they disagree."""
    trained = list(spec.contexts or [])
    if prefix_len == 0:
        if len(trained) != 1:
            raise TextebmError(f"{names.energy} {energy_arg}: trained on prefixes of {trained or 'unrecorded'} "
                               f"tokens; give {names.prefix_len}")
        prefix_len = trained[0]
    elif trained and prefix_len not in trained:
        raise TextebmError(f"{names.prefix_len} {prefix_len}: the energy {energy_arg} was trained on prefixes of "
                           f"{', '.join(map(str, trained))} tokens")
    if not length:
        log.info("%s 0: the energy's own, %d generated tokens after a prefix of %d", names.length,
                 spec.length - prefix_len, prefix_len)
    length = length or spec.length - prefix_len
    if prefix_len + length != spec.length:
        raise TextebmError(f"{names.prefix_len} {prefix_len} + {names.length} {length} = {prefix_len + length} "
                           f"tokens, but the energy {energy_arg} was trained on windows of {spec.length}")
    if length < 1:
        raise TextebmError(f"{names.prefix_len} {prefix_len} leaves nothing to generate in the energy's windows of "
                           f"{spec.length} tokens")
    return prefix_len, length


def check_negatives(base: tuple[str, Path], energies: Sequence[tuple[str, Path]], precision: str,
                    names: Names = Names()) -> None:
    """One P_LM (issue 35): each energy's training negatives (the --train files its `detect train`
    run records) were drawn by the base LM, compared by content, untruncated (top-k 0, temperature
    1: eq. 3's noise is P_LM itself) and in `precision`, and the energy was trained by eq. 3's
    binary NCE (`--loss bce`; a ranking margin learns no log density ratio); TextebmError naming
    what differs. An energy folder without its run's record, or negatives whose generator folder
    is gone, is not checked (logged)."""
    base_sha = None
    for arg, path in energies:
        record, config = _run_record(path)
        train = config.get("train")
        if config.get("loss", "bce") != "bce":
            raise TextebmError(f"{names.energy} {arg}: trained with --loss {config['loss']} ({record}); the joint "
                               "model needs eq. 3's binary NCE (--loss bce), whose optimum is log P_data / P_LM up "
                               "to a constant per prefix, which a ranking margin does not learn")
        if not train or not Path(train[0]).is_file():
            log.info("%s %s: its training negatives are not at hand (no run record, or the file moved); not checked "
                     "against %s", names.energy, arg, names.base)
            continue
        row = next((r for _, r in iter_jsonl(train[0])), {})
        top_k, temperature = row.get("top_k", 0), row.get("temperature", 1.0)
        if top_k or temperature != 1.0:
            raise TextebmError(f"{names.energy} {arg}: trained on negatives drawn with top-k {top_k}, temperature "
                               f"{temperature} ({train[0]}); the joint model P_LM(x) exp(-E(x)) / Z needs negatives "
                               "from P_LM itself: draw them with `negatives generate --top-k 0 --temperature 1`")
        drew = row.get("precision")
        if drew and drew != precision:
            raise TextebmError(f"{names.precision} {precision}: the energy {arg} was trained on negatives the base LM "
                               f"drew in {drew} ({train[0]}); use {names.precision} {drew}, so that the negatives, "
                               "log Z's samples and the test log-probabilities come from one P_LM")
        gen = row.get("generator")
        if not gen or not Path(gen).is_dir():
            log.info("%s %s: the generator of its negatives (%s) is not at hand; not checked against %s", names.energy,
                     arg, gen, names.base)
            continue
        base_sha = base_sha or folder_sha256(base[1])
        if folder_sha256(gen) != base_sha:
            raise TextebmError(f"{names.energy} {arg}: trained on negatives of {gen} ({train[0]}), another LM than "
                               f"{names.base} {base[0]} (their weights differ); the residual energy corrects the "
                               "P_LM that drew its negatives: give that LM as the base")


def _run_record(energy: Path) -> tuple[Path, dict]:
    """(config.json, its content) of the `detect train` run an energy folder belongs to ({} when
    there is none, or it cannot be read)."""
    record = (energy.parent if (energy / "energy.json").is_file() else energy) / "config.json"
    try:
        return record, read_json_object(record, "run config") if record.is_file() else {}
    except TextebmError:
        return record, {}


def reads_base(energy: Path, model: torch.nn.Module, base: Path, base_lm: torch.nn.Module) -> bool:
    """Whether a control energy (lmstats, its LM in `model.lm`) reads the base LM `base`: its run
    recorded that folder's content as its --base (`inputs_sha256`), or it holds the same weights (a
    run without the record; or the same weights saved elsewhere)."""
    recorded = _run_record(energy)[1].get("inputs_sha256")
    if isinstance(recorded, dict) and recorded.get("base") == input_sha256(base):
        return True
    return same_weights(base_lm, model.lm)


def same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    """Whether two models hold the same parameters, compared in `a`'s dtype (an lmstats energy keeps
    its LM in fp32 while the base LM may run in bf16)."""
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(
        x.shape == sb[k].shape and torch.equal(x, sb[k].to(device=x.device, dtype=x.dtype)) for k, x in sa.items())


def load_joint(base: tuple[str, Path], energies: Sequence[tuple[str, Path]], prefix_len: int, length: int,
               dtype: torch.dtype, device, names: Names = Names(),
               precision: str | None = None) -> tuple[BaseLM, list[JointEnergy], int, int]:
    """(base LM, energies, p, m) of the joint model: each energy (argument as given, folder found)
    loaded and its windows checked against `prefix_len` and `length` (`energy_shape`; several
    energies must share one shape), the base LM loaded in their vocabulary and checked to take
    [bos] + p + m tokens; with `precision` (the run's), the energies' negatives checked to come
    from this base LM in it (`check_negatives`). `names`: how messages name the settings."""
    loaded, shape = [], None
    for arg, path in energies:
        model, spec, tokenizer, vocab = load_energy(path, dtype=dtype, device=device, option=names.energy)
        s = energy_shape(spec, arg, prefix_len, length, names)
        if shape is not None and s != shape:
            raise TextebmError(f"{names.energy} {arg}: windows of {s[0]} + {s[1]} tokens, the first energy's "
                               f"{shape[0]} + {shape[1]}")
        shape = s
        loaded.append(JointEnergy(model, spec, tokenizer, vocab))
    lm, tok, meta = load_lm(base[1], dtype=dtype, device=device, option=names.base)
    base_lm = BaseLM(lm, tok, meta, loaded[0].vocab, name=f"{names.base} {base[0]}")
    base_lm.check_length(*shape, names.prefix_len)
    for (arg, path), e in zip(energies, loaded):
        if e.spec.kind == "lmstats" and not reads_base(path, e.model, base[1], lm):
            raise TextebmError(f"{names.energy} {arg}: a control energy (lmstats) that weighs the statistics of "
                               f"another LM than {names.base} {base[0]} (their weights differ); it corrects the base "
                               "LM's temperature only when it reads that LM: train it with `detect train --energy "
                               "lmstats --base` the base LM")
    if precision is not None:
        check_negatives(base, energies, precision, names)
    return base_lm, loaded, shape[0], shape[1]


@torch.inference_mode()
def _unit_energies(model, prefix: list[int], conts: list[list[int]], batch_size: int) -> np.ndarray:
    """UniTransfEnergy (a causal body, mean-pooled over the window or over the continuation,
    linear to a scalar) with the prefix's keys, values and summed states computed once.
    Continuations share one length; a continuation-pooled energy needs the prefix it was trained
    after (`prefix_len`)."""
    from transformers import DynamicCache

    body = model.body
    device = next(model.parameters()).device
    p = len(prefix)
    whole = model.pool != "continuation"  # the mean over the window, or over the continuation only
    if not whole and p != model.prefix_len:
        raise ValueError(f"this energy pools the continuation after {model.prefix_len} tokens; the prefix has {p}")
    was_training = model.training
    model.eval()
    with torch.autocast(device.type, enabled=False):
        ids = torch.tensor([prefix], device=device)  # (1, p)
        cache = DynamicCache(config=body.config)
        out = body(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=True, **cache_arg(body, cache))
        h_prefix = out.last_hidden_state  # (1, p, H)
        acc = fp32_or_better(h_prefix.dtype)  # as energy.pool
        prefix_sum = h_prefix.to(acc).sum(1)  # (1, H)
        res = []
        for s in range(0, len(conts), batch_size):
            batch = torch.tensor(conts[s:s + batch_size], device=device)  # (B, m)
            b, m = batch.shape
            c = copy.deepcopy(cache)
            c.batch_repeat_interleave(b)
            pos = torch.arange(p, p + m, device=device).expand(b, m)  # (B, m)
            mask = torch.ones(b, p + m, dtype=torch.long, device=device)  # (B, p+m)
            h = body(input_ids=batch, attention_mask=mask, position_ids=pos, use_cache=True,
                     **cache_arg(body, c)).last_hidden_state  # (B, m, H)
            mean = (((prefix_sum if whole else 0) + h.to(acc).sum(1)) / (p + m if whole else m)).to(h.dtype)  # (B, H)
            res.append(fp32_linear(mean, model.out.weight, model.out.bias).squeeze(-1).double().cpu())  # (B,)
    model.train(was_training)
    return torch.cat(res).numpy() if res else np.zeros(0)
