"""Greedy and beam-search decoding for an encoder-decoder with a key/value cache (and, through `PrefixLM`,
for a decoder-only model continuing prompts); T5's greedy span fills.

The model embeds at most `config.block_size` positions on either side: longer sources are cut to it,
and outputs stop at it (counted in `Decoded.truncated`) instead of asking for a position it has none for.
A model whose config has no block_size (T5: relative positions) has no such limit.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import torch
import torch.nn.functional as F


def position_limit(model) -> int | None:
    """The most positions the model embeds on either side, or None for no limit."""
    return getattr(model.config, "block_size", None)


@dataclass
class Decoded:
    outputs: list[list[int]]  # each source's output ids, without <bos> and <eos>
    truncated: int = 0  # outputs stopped at the model's length limit before their <eos>
    sources_truncated: int = 0  # sources cut to the model's length limit
    longest_source: int = 0  # tokens in the longest source, before cutting


def ids_before(ids: list[int], end: int) -> list[int]:
    """`ids` up to their first `end` (left out), or all of them."""
    return ids[: ids.index(end)] if end in ids else ids


def _reorder(cache: list[dict], index: torch.Tensor) -> None:
    for layer in cache:
        for part in layer.values():
            for key in part:
                part[key] = part[key].index_select(0, index)


@torch.no_grad()
def greedy(model, src: torch.Tensor, max_len: int, bos: int, eos: int) -> list[list[int]]:
    """The most likely token at each step, for a batch of sources (B, S); outputs stop at <eos>, or after
    max_len tokens (at most the model's block_size)."""
    max_len = min(max_len, position_limit(model) or max_len)
    memory, pad = model.encode(src)
    cache = model.new_cache()
    tokens = torch.full((src.size(0), 1), bos, dtype=torch.long, device=src.device)
    done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
    out = []
    for _ in range(max_len):
        next_id = model.decode(tokens, memory, pad, cache)[:, -1].argmax(-1)  # (B,)
        next_id = next_id.masked_fill(done, eos)
        out.append(next_id)
        done |= next_id == eos
        tokens = next_id[:, None]
        if done.all():
            break
    rows = torch.stack(out, dim=1).tolist()
    return [row[: row.index(eos)] if eos in row else row for row in rows]


def length_normalised(score: float, length: int, alpha: float) -> float:
    """GNMT's length penalty (Wu et al. 2016): score / ((5 + length) / 6) ** alpha; alpha 0 is none."""
    return score / ((5 + length) / 6) ** alpha


@torch.no_grad()
def beam_search(
    model, src: torch.Tensor, beam_size: int, max_len: int, bos: int, eos: int, length_penalty: float = 0.6
) -> list[list[int]]:
    """Keeps the beam_size best partial outputs per source; a finished output is ranked by its
    length-normalised log-probability. beam_size 1 is greedy decoding. Outputs have at most max_len
    tokens (at most the model's block_size); one that reaches max_len without <eos> is ranked as it is.

    A source stops early only once no partial output can still end better than its best finished one
    (its log-probability can only fall, and the length penalty divides it by at most that of max_len), so
    stopping early never changes the result."""
    max_len = min(max_len, position_limit(model) or max_len)
    B, K = src.size(0), beam_size
    memory, pad = model.encode(src)
    memory, pad = memory.repeat_interleave(K, 0), pad.repeat_interleave(K, 0)  # (B*K, S, C)
    cache = model.new_cache()
    sequences = torch.full((B * K, 1), bos, dtype=torch.long, device=src.device)
    scores = torch.full((B, K), float("-inf"), device=src.device)
    scores[:, 0] = 0.0  # all beams start identical: keep one
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(B)]
    done = [False] * B
    for step in range(max_len):
        logp = F.log_softmax(model.decode(sequences[:, -1:], memory, pad, cache)[:, -1].float(), dim=-1)
        V = logp.size(-1)
        candidates = (scores[:, :, None] + logp.view(B, K, V)).view(B, K * V)
        top_scores, top_ids = candidates.topk(min(2 * K, K * V), dim=-1)  # 2K: K alive after <eos>s
        new_scores = torch.full((B, K), float("-inf"), device=src.device)
        origin = torch.zeros(B, K, dtype=torch.long, device=src.device)
        token = torch.full((B, K), eos, dtype=torch.long, device=src.device)
        for b in range(B):
            if done[b]:
                continue  # its beams idle
            alive = 0
            for score, flat in zip(top_scores[b].tolist(), top_ids[b].tolist()):
                if score == float("-inf"):
                    break
                beam, word = divmod(flat, V)
                if word == eos:
                    hypothesis = sequences[b * K + beam, 1:].tolist()
                    finished[b].append((length_normalised(score, step + 1, length_penalty), hypothesis))
                else:
                    new_scores[b, alive], origin[b, alive], token[b, alive] = score, beam, word
                    alive += 1
                if alive == K:
                    break
            if alive == 0:
                done[b] = True
            elif finished[b]:  # the best any live output can still reach, at any length up to max_len
                best_live = new_scores[b, 0].item()
                reachable = max(
                    length_normalised(best_live, n, length_penalty) for n in (min(step + 2, max_len), max_len)
                )
                done[b] = max(f[0] for f in finished[b]) >= reachable
        if all(done):
            break
        index = (torch.arange(B, device=src.device)[:, None] * K + origin).view(-1)
        _reorder(cache, index)
        sequences = torch.cat([sequences[index], token.view(-1, 1)], dim=1)
        scores = new_scores
    for b in range(B):  # live outputs that reached max_len tokens compete as they are
        if not done[b]:
            for k in range(K):
                if scores[b, k] > float("-inf"):
                    hypothesis = sequences[b * K + k, 1:].tolist()
                    finished[b].append(
                        (length_normalised(scores[b, k].item(), len(hypothesis), length_penalty), hypothesis)
                    )
    return [max(f, key=lambda item: item[0])[1] for f in finished]


def fit_sources(src: torch.Tensor, limit: int, pad: int, eos: int) -> tuple[torch.Tensor, int, int]:
    """Sources (B, S) cut to `limit` positions, a cut one ending in <eos> as the model saw in training;
    with how many were cut and the longest length before."""
    lengths = (src != pad).sum(1)
    longest = int(lengths.max()) if len(src) else 0
    if src.size(1) <= limit:
        return src, 0, longest
    cut = lengths > limit
    src = src[:, :limit].clone()
    src[cut, -1] = eos
    return src, int(cut.sum()), longest


def decode(
    model, src: torch.Tensor, beam_size: int, max_len: int, bos: int, eos: int, length_penalty: float = 0.6
) -> Decoded:
    """Beam search, or for beam_size 1 the batched greedy loop that gives the same outputs faster.
    Never asks the model for a position past its block_size: see the module's docstring."""
    limit = position_limit(model) or max(src.size(1), max_len)
    src, sources_truncated, longest = fit_sources(src, limit, model.config.pad_id, eos)
    if beam_size == 1:
        outputs = greedy(model, src, max_len, bos, eos)
    else:
        outputs = beam_search(model, src, beam_size, max_len, bos, eos, length_penalty)
    # An output of `limit` tokens never produced <eos> (one that did is shorter); when the caller allowed
    # more, the model's length is what stopped it.
    truncated = sum(len(ids) >= limit for ids in outputs) if max_len > limit else 0
    return Decoded(outputs, truncated, sources_truncated, longest)


class PrefixLM:
    """A decoder-only model with a key/value cache (`new_cache()`, `forward(idx, cache)`) seen as an
    encoder-decoder, so greedy() and beam_search() continue its prompts: the "source" is a batch of prompts
    of one length (B, P), read whole at the first decoding step, and the outputs have the rest of the
    model's positions (block_size - P)."""

    def __init__(self, model, prompt_length: int):
        self.model = model
        self.config = SimpleNamespace(block_size=model.config.block_size - prompt_length)

    def encode(self, prompts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return prompts, torch.zeros_like(prompts, dtype=torch.bool)  # nothing is padding

    def new_cache(self) -> list[dict]:
        return [{"self": layer} for layer in self.model.new_cache()]  # the layout _reorder walks

    def decode(self, tokens: torch.Tensor, prompts: torch.Tensor, pad, cache: list[dict]) -> torch.Tensor:
        layers = [layer["self"] for layer in cache]
        return self.model(prompts if not layers[0] else tokens, layers)  # the prompt first (its <bos> unused)


def continue_prompts(
    model, prompts: torch.Tensor, max_new: int, eos: int, beam_size: int = 1, length_penalty: float = 0.6
) -> Decoded:
    """A decoder-only model's outputs after prompts of one length (B, P), up to <eos> (left out) or max_new
    tokens, within its block_size (an output stopped there is counted as truncated)."""
    room = model.config.block_size - prompts.size(1)
    if beam_size == 1:  # every model's generate(); no cache needed
        rows = model.generate(prompts, min(max_new, room), temperature=0)[:, prompts.size(1) :].tolist()
        outputs = [row[: row.index(eos)] if eos in row else row for row in rows]
    else:
        outputs = beam_search(PrefixLM(model, prompts.size(1)), prompts, beam_size, max_new, eos, eos, length_penalty)
    return Decoded(outputs, sum(len(ids) >= room for ids in outputs) if max_new > room else 0)


@torch.no_grad()
def fill_spans_greedy(model, inputs: torch.Tensor, max_len: int, start: int, eos: int) -> list[list[int]]:
    """T5: greedy decoding of the targets (each sentinel, then the span's tokens) for a batch of corrupted
    inputs (B, S), from the start token (T5: the pad id), up to <eos> or max_len tokens."""
    memory, pad = model.encode(inputs)
    cache = model.new_cache()
    out = torch.full((len(inputs), 1), start, device=inputs.device)
    for _ in range(max_len):
        next_id = model.decode(out[:, -1:], memory, pad, cache)[:, -1].argmax(-1, keepdim=True)
        out = torch.cat([out, next_id], 1)
        if (out == eos).any(1).all():
            break
    return [ids[1:] for ids in out.tolist()]
