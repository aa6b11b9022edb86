"""The BiLSTM-CRF tagger of paper e (Song & Ou 2021, sec. 3.2-3.3), its spec and its folder.

    word ids (B, T) -> embedding (B, T, E) [; character CNN (B, T, F)] -> bidirectional LSTM:
    forward states h_f and backward states h_b (B, T, H) each -> [h_f; h_b] -> linear -> node
    potentials phi (B, T, K) in fp32

plus a transition matrix A (K, K) (the edge potentials): the CRF of eq. (6), whose maths is in
`textebm.losses.crf` (no start or end transitions, as in the paper). The same network serves the
three methods of paper e: supervised (everything trained), pre-training (the BiLSTM trained as a
TRF language model whose potential, eq. (3), reads h_f and h_b, then frozen while the linear
layer and A are fine-tuned) and joint training (the JRF of eq. 6). `states` exposes h_f and h_b,
`neighbour_states` the pair eq. (3) scores token x_t with: h_f at t-1 and h_b at t+1.

The character CNN (`char_vocab` > 0) is thu-spmi/semi-EBM's `char_emb_cnn` as its `run_crf.py`
configures it: each word's character ids (B, T, C) embedded (50-d), one convolution per width
(2, 3, 4; 100 filters each, 'same' padding) with ReLU, zeroed past the word's last character and
max-pooled over the characters; the F = 300 features join the word embedding. A sentence given
only by word ids reads each word's characters from the `word_chars` table (V, C) (kept with the
weights); a tagged text passes the characters of its tokens as written (`chars`), so a word
outside the vocabulary keeps its spelling.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor, nn

from textebm import specs
from textebm.energy import fp32_linear
from textebm.errors import InputError
from textebm.losses.crf import crf_nll, viterbi
from textebm.models.kinds import ModelKind

SPEC_FILE = "tagger.json"
KIND = ModelKind("tagger", SPEC_FILE, "a textebm tagger",
                 "a tagger trained with `textebm tag train` (RUN or RUN/model)")


@dataclass
class TaggerSpec:
    """What `tagger.json` records of a BiLSTM-CRF tagger."""

    vocab_size: int  # word ids the embedding reads
    tags: list[str]  # the tag set; tag id k is tags[k]
    embed: int = 100  # word embedding size (thu-spmi/semi-EBM's mix_net.Config default: 100)
    hidden: int = 200  # LSTM state size per direction (mix_net.Config's default: 200)
    layers: int = 1  # stacked bidirectional LSTM layers
    dropout: float = 0.0  # on the embeddings and on the LSTM's outputs, while training
    pad_id: int = 0  # the word id of padding
    char_vocab: int = 0  # character ids the character CNN reads (0: no character CNN)
    char_embed: int = 50  # character embedding size (thu-spmi/semi-EBM run_crf.py: 50)
    char_filters: int = 100  # filters per width (run_crf.py: 100)
    char_widths: list[int] = field(default_factory=lambda: [2, 3, 4])  # (run_crf.py: [2, 3, 4])
    word_chars: int = 24  # character ids per word in the `word_chars` table (marks included)


def spec_from_dict(raw: dict, where) -> TaggerSpec:
    """A `TaggerSpec` from the parsed `tagger.json` at `where` (InputError naming file and field)."""
    spec = specs.spec_from_dict(TaggerSpec, raw, where)
    for name in ("vocab_size", "embed", "hidden", "layers"):
        if getattr(spec, name) < 1:
            raise InputError(where, f"'{name}' must be at least 1, got {getattr(spec, name)}")
    if len(spec.tags) < 1 or len(set(spec.tags)) != len(spec.tags):
        raise InputError(where, f"'tags' must be a non-empty list of distinct tags, got {spec.tags!r}")
    if not 0.0 <= spec.dropout < 1.0:
        raise InputError(where, f"'dropout' must lie in [0, 1), got {spec.dropout}")
    if not 0 <= spec.pad_id < spec.vocab_size:
        raise InputError(where, f"'pad_id' must lie in [0, vocab_size = {spec.vocab_size}), got {spec.pad_id}")
    if spec.char_vocab < 0:
        raise InputError(where, f"'char_vocab' must be at least 0 (0: no character CNN), got {spec.char_vocab}")
    for name in ("char_embed", "char_filters", "word_chars"):
        if getattr(spec, name) < 1:
            raise InputError(where, f"'{name}' must be at least 1, got {getattr(spec, name)}")
    if not spec.char_widths or min(spec.char_widths) < 1:
        raise InputError(where, f"'char_widths' must be a non-empty list of widths >= 1, got {spec.char_widths}")
    return spec


def char_features(emb: nn.Embedding, convs: nn.ModuleList, chars: Tensor) -> Tensor:
    """The character CNN's word features: chars (N, C) character ids (0 past each word's end) ->
    (N, F), F = Σ filters: per width a 'same'-padded convolution and ReLU over the embedded
    characters, zeroed where there is no character, max-pooled over the C positions (so a word's
    features do not depend on how far it is padded)."""
    present = (chars > 0).unsqueeze(1)  # (N, 1, C)
    x = emb(chars).transpose(1, 2) * present  # (N, E_c, C): padding embeds as 0, as the paper's mask does
    out = []
    for c in convs:  # 'same' padding as TF and torch place it: (w - 1) // 2 zeros before, the rest after
        w = c.kernel_size[0]
        out.append(torch.relu(c(nn.functional.pad(x, ((w - 1) // 2, w - 1 - (w - 1) // 2)))))  # (N, filters, C)
    conv = torch.cat(out, 1) * present  # (N, F, C)
    return conv.amax(2)  # (N, F)


class BiLSTMCRF(nn.Module):
    """Word ids and a right-padded mask in; node potentials, the CRF's loss and Viterbi tags out."""
    FP32_MODULES = ("out",)  # the node potentials stay fp32 (models/mixed.py)

    def __init__(self, spec: TaggerSpec):
        super().__init__()
        self.spec = spec
        self.embed = nn.Embedding(spec.vocab_size, spec.embed, padding_idx=spec.pad_id)
        width = spec.embed
        if spec.char_vocab:
            self.char_embed = nn.Embedding(spec.char_vocab, spec.char_embed, padding_idx=0)
            self.char_convs = nn.ModuleList(nn.Conv1d(spec.char_embed, spec.char_filters, w)
                                            for w in spec.char_widths)
            self.register_buffer("word_chars", torch.zeros(spec.vocab_size, spec.word_chars, dtype=torch.long))  # (V, C)
            width += spec.char_filters * len(spec.char_widths)
        self.lstm = nn.LSTM(width, spec.hidden, num_layers=spec.layers, batch_first=True,
                            bidirectional=True, dropout=spec.dropout if spec.layers > 1 else 0.0)
        self.drop = nn.Dropout(spec.dropout)
        self.out = nn.Linear(2 * spec.hidden, len(spec.tags))  # the node potentials' layer
        self.transitions = nn.Parameter(torch.zeros(len(spec.tags), len(spec.tags)))  # A[y_{t-1}, y_t]

    def set_word_chars(self, table: list[list[int]]) -> None:
        """The `word_chars` table from each word's character ids (word id order, as
        `WordVocab.word_chars` gives them), each cut to the table's width."""
        C = self.spec.word_chars
        rows = torch.zeros(self.spec.vocab_size, C, dtype=torch.long)  # (V, C)
        if len(table) != self.spec.vocab_size:
            raise ValueError(f"{len(table)} words' characters for a vocabulary of {self.spec.vocab_size}")
        for v, ids in enumerate(table):
            rows[v, :min(len(ids), C)] = torch.tensor(ids[:C], dtype=torch.long)
        self.word_chars.copy_(rows)

    def inputs(self, input_ids: Tensor, chars: Tensor | None = None) -> Tensor:
        """The LSTM's inputs (B, T, E [+ F]): word embeddings, and the character CNN's features of
        `chars` (B, T, C) or, without them, of the `word_chars` table's rows."""
        x = self.embed(input_ids)  # (B, T, E)
        if not self.spec.char_vocab:
            return x
        B, T = input_ids.shape
        if chars is None:  # each distinct word once, its table row cut to the longest spelling among them
            words, where = torch.unique(input_ids, return_inverse=True)  # (U,), (B, T)
            spelt = self.word_chars[words]  # (U, C)
            spelt = spelt[:, :max(int((spelt > 0).sum(1).max()), 1)]
            feats = char_features(self.char_embed, self.char_convs, spelt)[where.reshape(-1)]  # (B·T, F)
        else:
            feats = char_features(self.char_embed, self.char_convs, chars.reshape(B * T, -1))  # (B·T, F)
        return torch.cat([x, feats.reshape(B, T, -1).to(x.dtype)], -1)  # (B, T, E + F)

    def states(self, input_ids: Tensor, mask: Tensor, chars: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """(h_f, h_b), each (B, T, H): the top layer's forward state at t (it has read x_1..x_t) and
        backward state at t (it has read x_t..x_l), zero at padding positions. Sentences are
        packed, so the backward LSTM starts at each sentence's own last token."""
        lengths = mask.sum(1).cpu()  # (B,)
        x = self.drop(self.inputs(input_ids, chars))  # (B, T, E [+ F])
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        h, _ = self.lstm(packed)
        h, _ = nn.utils.rnn.pad_packed_sequence(h, batch_first=True, total_length=input_ids.shape[1])  # (B, T, 2H)
        H = self.spec.hidden
        return h[..., :H], h[..., H:]  # (B, T, H), (B, T, H)

    def neighbour_states(self, input_ids: Tensor, mask: Tensor, chars: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """(h_f at t-1, h_b at t+1), each (B, T, H): what eq. (3) scores token x_t with
        (u(x) = Σ_t h_f[t-1]·e(x_t) + Σ_t h_b[t+1]·e(x_t)); zero where there is no such state (t = 0
        for the forward one, a sentence's last token for the backward one) and at padding."""
        h_f, h_b = self.states(input_ids, mask, chars)
        zero = torch.zeros_like(h_f[:, :1])  # (B, 1, H)
        before = torch.cat([zero, h_f[:, :-1]], 1)  # (B, T, H): h_f[t-1]
        after = torch.cat([h_b[:, 1:], zero], 1)  # (B, T, H): h_b[t+1], 0 past the end (padding is 0)
        return before * mask[..., None], after * mask[..., None]

    def potentials(self, input_ids: Tensor, mask: Tensor, chars: Tensor | None = None) -> Tensor:
        """Node potentials phi (B, T, K) in fp32 or better (the output layer runs in fp32)."""
        h_f, h_b = self.states(input_ids, mask, chars)
        h = self.drop(torch.cat([h_f, h_b], -1))  # (B, T, 2H)
        return fp32_linear(h, self.out.weight, self.out.bias)  # (B, T, K)

    forward = potentials

    def nll(self, input_ids: Tensor, tags: Tensor, mask: Tensor, reduction: str = "mean",
            chars: Tensor | None = None) -> Tensor:
        """−log p(y | x) of the CRF (mean over sentences, or (B,) with reduction="none")."""
        return crf_nll(self.potentials(input_ids, mask, chars), self.transitions, tags, mask, reduction)

    @torch.no_grad()
    def decode(self, input_ids: Tensor, mask: Tensor, pad: int = -1, chars: Tensor | None = None) -> Tensor:
        """The Viterbi tags (B, T), `pad` past each sentence's end."""
        return viterbi(self.potentials(input_ids, mask, chars), self.transitions, mask, pad)[0]


def save_tagger(model: BiLSTMCRF, path: str | Path) -> None:
    """model.safetensors and tagger.json (the spec) in `path`; `load_tagger` in models/load.py
    reads them back."""
    specs.save_with_spec(model, path, SPEC_FILE)
