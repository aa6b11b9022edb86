"""Sequence energy functions E(x | c) of Bakhtin et al. (2019), sec. 4.3, over a window of token ids.

Every module maps (input_ids (B, T), attention_mask (B, T)) to energies (B,) in fp32 (the
output layer runs in fp32 whatever precision the body ran in); low energy = real text. The window
holds the context and the continuation together, as the paper scores them.

    linear     a learnt scalar per vocabulary token, summed over the window (a bag of tokens)
    bilstm     token embeddings, a bidirectional LSTM, mean-pooled over the window, linear to a scalar
    unitransf  a causal transformer (Llama blocks; started from a causal LM in the shared
               vocabulary, as the paper starts from its LM), mean-pooled, linear to a scalar
    bitransf   a bidirectional transformer (BERT blocks, or a pretrained encoder such as MiniLM),
               its first position, linear to a scalar

Deng et al. (2020) train the same energies as the residual of a language model; these modules
are shared by both systems.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

KINDS = ("linear", "bilstm", "unitransf", "bitransf")


def _head(h: Tensor, layer: nn.Linear) -> Tensor:
    return nn.functional.linear(h.float(), layer.weight.float(), layer.bias.float()).squeeze(-1)  # (B,)


def _mean(h: Tensor, mask: Tensor) -> Tensor:
    m = mask[..., None].to(h.dtype)  # (B, T, 1)
    return (h * m).sum(1) / m.sum(1).clamp(min=1)  # (B, H)


class LinearEnergy(nn.Module):
    """E(x) = Σ_t w[x_t] + b."""

    def __init__(self, vocab_size: int):
        super().__init__()
        self.weight = nn.Embedding(vocab_size, 1)
        nn.init.zeros_(self.weight.weight)
        self.bias = nn.Parameter(torch.zeros(()))

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        w = self.weight(input_ids).squeeze(-1).float()  # (B, T)
        return torch.where(attention_mask.bool(), w, torch.zeros_like(w)).sum(1) + self.bias.float()  # (B,)


class BiLSTMEnergy(nn.Module):
    def __init__(self, vocab_size: int, embed: int = 256, hidden: int = 256, layers: int = 1, pad_id: int = 0):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, embed, padding_idx=pad_id)
        self.lstm = nn.LSTM(embed, hidden, num_layers=layers, batch_first=True, bidirectional=True)
        self.out = nn.Linear(2 * hidden, 1)

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        lengths = attention_mask.sum(1).clamp(min=1).cpu()  # (B,)
        x = self.embed(input_ids)  # (B, T, E)
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        h, _ = self.lstm(packed)
        h, _ = nn.utils.rnn.pad_packed_sequence(h, batch_first=True, total_length=input_ids.shape[1])  # (B, T, 2H)
        return _head(_mean(h, attention_mask), self.out)


class UniTransfEnergy(nn.Module):
    """A causal transformer body (e.g. the `.model` of a LlamaForCausalLM), mean-pooled."""

    def __init__(self, body: nn.Module):
        super().__init__()
        self.body = body
        self.out = nn.Linear(body.config.hidden_size, 1)

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        h = self.body(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # (B, T, H)
        return _head(_mean(h, attention_mask), self.out)


class BiTransfEnergy(nn.Module):
    """A bidirectional encoder (BERT-like), its first position ([CLS] / <s>)."""

    def __init__(self, encoder: nn.Module):
        super().__init__()
        self.encoder = encoder
        self.out = nn.Linear(encoder.config.hidden_size, 1)

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        h = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # (B, T, H)
        return _head(h[:, 0], self.out)
