"""The noise of DNCE: a 1-layer LSTM language model with lengths from the empirical distribution.

    q(l, x) = π_l · Π_{t=1..l} q(x_t | x_<t),    q(· | x_<t) = softmax(W h_t + b) over the words
                                                                (the padding id excluded)

h_t the LSTM's state after a learnt start vector and x_1..x_{t−1}. The length is drawn first from
π (the training sentences' length distribution, fixed), then the words left to right, as in
thu-spmi/CAT's TRF noise (`getnoise`: lengths from `pi_noise_model`); there is no end-of-sentence
token. q sums to one over all sentences of lengths 1..L (tested by enumeration). `log_prob` scores
given sentences; `sample` draws them with their log q. Both in fp32 or better (the output layer is
`textebm.energy.fp32_linear`).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from textebm.energy import fp32_linear
from textebm.models.trf import check_length_probs
from textebm.precision import fp32_or_better
from textebm.sampling import sample_top_k


class NoiseLM(nn.Module):
    """q(l, x) over word ids 0..V−1 (never `pad_id`), lengths 1..L with probabilities π."""
    FP32_MODULES = ("out",)  # the output layer stays fp32 (models/mixed.py)

    def __init__(self, vocab_size: int, length_probs: Tensor, embed: int = 100, hidden: int = 200, pad_id: int = 0):
        super().__init__()
        check_length_probs(length_probs)
        if not 0 <= pad_id < vocab_size or vocab_size < 2:
            raise ValueError(f"need vocab_size >= 2 and 0 <= pad_id < vocab_size, got {vocab_size}, {pad_id}")
        self.pad_id = pad_id
        self.embed = nn.Embedding(vocab_size, embed)
        self.start = nn.Parameter(torch.zeros(embed))  # the input before x_1
        self.lstm = nn.LSTM(embed, hidden, num_layers=1, batch_first=True)
        self.out = nn.Linear(hidden, vocab_size)
        self.register_buffer("length_probs", length_probs.to(torch.float64))  # (L + 1,)

    @property
    def max_len(self) -> int:
        return self.length_probs.shape[0] - 1

    def _log_softmax(self, h: Tensor) -> Tensor:
        """h (..., H) -> log q(· | history) (..., V) with the padding id at −inf."""
        logits = fp32_linear(h, self.out.weight, self.out.bias)  # (..., V)
        logits[..., self.pad_id] = float("-inf")
        return logits.log_softmax(-1)

    def log_prob(self, input_ids: Tensor, mask: Tensor) -> Tensor:
        """log q(l, x) (B,) of right-padded sentences (B, T), l = mask.sum(1) in [1, L]."""
        lengths = mask.sum(1)  # (B,)
        if int(lengths.min()) < 1 or int(lengths.max()) > self.max_len:
            raise ValueError(f"sentence lengths must lie in [1, {self.max_len}], got "
                             f"{int(lengths.min())}..{int(lengths.max())}")
        B = input_ids.shape[0]
        x = self.embed(input_ids)  # (B, T, E)
        x = torch.cat([self.start.expand(B, 1, -1), x[:, :-1]], 1)  # (B, T, E): start, x_1..x_{T-1}
        h, _ = self.lstm(x)  # (B, T, H): causal, so padding to the right changes nothing before it
        logq = self._log_softmax(h)  # (B, T, V)
        ids = input_ids.masked_fill(~mask, 0 if self.pad_id != 0 else 1)  # (B, T) any real id at padding
        tok = logq.gather(-1, ids[..., None]).squeeze(-1)  # (B, T)
        tok = torch.where(mask, tok, torch.zeros_like(tok))  # (B, T)
        return tok.sum(1) + self.length_probs.log().to(tok.dtype)[lengths]  # (B,)

    @torch.no_grad()
    def sample(self, n: int, generator: torch.Generator | None = None, compact: bool = True,
               lengths: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """n sentences: ids (n, T) right-padded with pad_id, mask (n, T), log q(l, x) (n,);
        T = the longest length drawn. Lengths ~ π (or the given `lengths` (n,), each in [1, L]:
        the words are then drawn from q(x | l); log q(l, x) still counts log π_l), then words left
        to right.

        The rows run sorted by length, longest first, so at step t the rows still drawing are a
        prefix; `compact` steps only those (a sentence of mean length l̄ among n drawn up to T costs
        l̄/T of the plain loop, about 0.4 for Brown-like lengths), the plain loop (`compact=False`)
        steps all n and discards the words past each row's length. Both draw the same uniforms in
        the same order, so they give the same sentences (tested)."""
        device = self.start.device
        draw_on = generator.device if generator is not None else device  # a CPU generator drives a CUDA model too
        if lengths is None:
            lengths = torch.multinomial(self.length_probs.float().to(draw_on), n, replacement=True,
                                        generator=generator).to(device)  # (n,)
        else:
            lengths = torch.as_tensor(lengths, dtype=torch.long, device=device).reshape(-1)  # (n,)
            if lengths.numel() != n or int(lengths.min()) < 1 or int(lengths.max()) > self.max_len:
                raise ValueError(f"lengths must be {n} values in [1, {self.max_len}]")
        T = int(lengths.max())
        order = torch.argsort(lengths, descending=True, stable=True)  # (n,): longest first
        by_len = lengths[order]  # (n,) non-increasing
        running = (by_len[None, :] > torch.arange(T, device=device)[:, None]).sum(1).tolist()  # rows live at t
        u_order = order.to(draw_on)
        ids = torch.full((n, T), self.pad_id, dtype=torch.long, device=device)  # (n, T), sorted rows
        logq = torch.zeros(n, dtype=fp32_or_better(self.out.weight.dtype), device=device)  # (n,), sorted rows
        x = self.start.expand(n, 1, -1)  # (m, 1, E)
        state = None
        for t in range(T):
            m = running[t] if compact else n
            if m < x.shape[0]:
                x, state = x[:m], (state[0][:, :m], state[1][:, :m])
            h, state = self.lstm(x, state)  # (m, 1, H)
            lp = self._log_softmax(h[:, 0])  # (m, V)
            u = torch.rand(n, generator=generator, dtype=torch.float64, device=draw_on)  # (n,) every row's
            w = sample_top_k(lp, lp.shape[-1], 1.0, u[u_order[:m]].to(device), log_probs=True)[0]  # (m,)
            live = t < by_len[:m]  # (m,): all True when compact
            ids[:m, t] = torch.where(live, w, ids[:m, t])
            logq[:m] += torch.where(live, lp.gather(1, w[:, None])[:, 0], torch.zeros_like(logq[:m]))
            x = self.embed(w)[:, None]  # (m, 1, E)
        mask = torch.arange(T, device=device)[None, :] < by_len[:, None]  # (n, T), sorted rows
        logq = logq + self.length_probs.log().to(logq.dtype)[by_len]
        back = torch.empty_like(order)
        back[order] = torch.arange(n, device=device)  # row i of the draw is sorted row back[i]
        return ids[back], mask[back], logq[back]
