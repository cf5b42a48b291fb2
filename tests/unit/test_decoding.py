"""Beam search is exact where it can be checked exactly: against every sequence of a tiny vocabulary, against
a plain re-implementation without a cache or early stopping, and alone against inside a padded batch; for
each encoder-decoder (encdec, and T5 read as sequence to sequence) and the gpt prefix LM."""

import functools
import itertools

import pytest
import torch

from transformer_lab.models.encdec import EncDec, EncDecConfig
from transformer_lab.models.gpt import GPT, GPTConfig
from transformer_lab.models.t5 import T5, T5Config
from transformer_lab.tasks.decoding import PrefixLM, beam_search, greedy, length_normalised

PAD, BOS, EOS = 0, 1, 2


def peaked(model, scale=3.0):
    """Random weights large enough that the model's next-token distributions differ (no near ties)."""
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3)
        model.lm_head.weight.mul_(scale)
    return model.eval()


def encdec(vocab_size, seed=0, scale=3.0):
    torch.manual_seed(seed)
    config = EncDecConfig(vocab_size=vocab_size, block_size=16, n_layer=2, n_head=2, n_embd=16, dropout=0.0)
    return peaked(EncDec(config), scale)


def t5(vocab_size, seed=0, scale=3.0):
    torch.manual_seed(seed)
    config = T5Config(vocab_size=vocab_size, n_layer=2, n_head=2, n_embd=16, d_ff=32, dropout=0.0, pad_id=PAD)
    return peaked(T5(config), scale)


ENCODER_DECODERS = {"encdec": encdec, "t5": t5}


def gpt_as_encdec(vocab_size, prompt_length, max_len, seed=0):
    torch.manual_seed(seed)
    config = GPTConfig(vocab_size=vocab_size, block_size=prompt_length + max_len, n_layer=2, n_head=2, n_embd=16)
    return PrefixLM(peaked(GPT(config)), prompt_length)


def log_probs(model, src, targets):
    """The model's log-probability of each target (equally long token lists) after one source (1, S), each
    computed from its whole sequence at once (no cache), the targets side by side in one batch."""
    if not targets[0]:
        return [0.0] * len(targets)
    if isinstance(model, PrefixLM):  # the prompt's last position predicts the first output token
        prompt = src[0].tolist()
        logits = model.model(torch.tensor([prompt + t[:-1] for t in targets]))[:, len(prompt) - 1 :]
    else:
        memory, pad = model.encode(src)
        B = len(targets)
        logits = model.decode(
            torch.tensor([[BOS, *t[:-1]] for t in targets]), memory.expand(B, -1, -1), pad.expand(B, -1)
        )
    chosen = logits.float().log_softmax(-1).gather(-1, torch.tensor(targets).unsqueeze(-1))  # (B, T, 1)
    return chosen.sum((1, 2)).tolist()


def exhaustive(model, src, max_len, alpha):
    """The best output by brute force: every sequence that ends in <eos> within max_len tokens, and every
    sequence of max_len tokens without one, ranked as beam_search ranks finished outputs."""
    words = [w for w in range(model_vocab(model)) if w != EOS]
    scored = []
    for n in range(max_len + 1):
        outputs = list(map(list, itertools.product(words, repeat=n)))
        ends = n < max_len
        length = n + 1 if ends else n
        scores = log_probs(model, src, [output + [EOS] * ends for output in outputs])
        scored += [(length_normalised(score, length, alpha), output) for score, output in zip(scores, outputs)]
    scored.sort(key=lambda item: -item[0])
    assert scored[0][0] - scored[1][0] > 1e-4, "a near tie: choose another seed"
    return scored[0][1]


def model_vocab(model):
    return (model.model if isinstance(model, PrefixLM) else model).config.vocab_size


@pytest.mark.parametrize("alpha", [0.0, 0.6, 2.0])
@pytest.mark.parametrize("kind", ["encdec", "t5", "gpt"])
def test_a_beam_as_wide_as_every_prefix_is_exhaustive_search(kind, alpha):
    # 4 words besides <eos>, outputs of up to 4 tokens: at most 4^3 = 64 live prefixes, so a beam of 64
    # keeps them all and must find the best of the 1 + 4 + 16 + 64 + 256 possible outputs.
    vocab, max_len = 5, 4
    for seed in range(2):
        model = gpt_as_encdec(vocab, 3, max_len, seed) if kind == "gpt" else ENCODER_DECODERS[kind](vocab, seed)
        src = torch.randint(3, vocab, (2, 3), generator=torch.Generator().manual_seed(seed))
        outputs = beam_search(model, src, 64, max_len, BOS, EOS, alpha)
        for row in range(2):
            assert outputs[row] == exhaustive(model, src[row : row + 1], max_len, alpha), (seed, row)


def reference_beam_search(model, src, K, max_len):
    """Textbook beam search for one source (1, S): the whole sequence recomputed at every step, no cache,
    every step up to max_len taken (no early stopping); keeps the K best live prefixes, collects every
    prefix + <eos> met among the candidates on the way. Returns the finished outputs as (log-probability,
    length, output), for `best` to rank: which prefixes live and finish does not depend on the length penalty."""
    memory, pad = model.encode(src)
    live, finished = [(0.0, [])], []
    for step in range(max_len):
        candidates = []
        for (score, prefix), logp in zip(live, log_probs_next(model, memory, pad, [p for _, p in live])):
            candidates += [(score + logp[w], prefix + [w]) for w in range(len(logp))]
        candidates.sort(key=lambda item: -item[0])
        live = []
        for score, sequence in candidates:
            if sequence[-1] == EOS:
                finished.append((score, step + 1, sequence[:-1]))
            else:
                live.append((score, sequence))
            if len(live) == K:
                break
    return finished + [(score, max_len, sequence) for score, sequence in live]


def best(finished, alpha):
    """The output reference_beam_search returns under length penalty `alpha`."""
    return max(finished, key=lambda item: length_normalised(item[0], item[1], alpha))[2]


def log_probs_next(model, memory, pad, prefixes):
    """The next token's log-probabilities after each prefix (all of one length), each recomputed whole."""
    B = len(prefixes)
    logits = model.decode(torch.tensor([[BOS, *p] for p in prefixes]), memory.expand(B, -1, -1), pad.expand(B, -1))
    return logits[:, -1].float().log_softmax(-1).tolist()


class EagerToStop:
    """A model whose <eos> logit is raised by `bonus`: K outputs finish within a few steps, while longer
    ones, which the length penalty favours, may still end better."""

    def __init__(self, model, bonus):
        self.model, self.config, self.bonus = model, model.config, bonus

    def encode(self, src):
        return self.model.encode(src)

    def new_cache(self):
        return self.model.new_cache()

    def decode(self, tokens, memory, pad, cache=None):
        logits = self.model.decode(tokens, memory, pad, cache)
        logits[..., EOS] += self.bonus
        return logits


@functools.cache
def textbook(kind, eos_bonus, seed, K):
    """The model, the 16 sources, and what reference_beam_search finishes for each: once per worker for all
    the length penalties below (the reference's cost is its whole-sequence recomputing)."""
    model = EagerToStop(ENCODER_DECODERS[kind](12, seed), eos_bonus)
    src = torch.randint(3, 12, (16, 6), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        return model, src, [reference_beam_search(model, src[i : i + 1], K, 10) for i in range(len(src))]


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0])
@pytest.mark.parametrize("eos_bonus", [0.0, 4.0])
@pytest.mark.parametrize("kind", ENCODER_DECODERS)
def test_beam_search_equals_the_textbook_algorithm_run_to_the_length_limit(kind, eos_bonus, alpha):
    # Cached decoding with beams reordered, early stopping, batching: none of them may change an output.
    # Stopping a source as soon as it has K finished outputs gets 9 of the 16 sources of model seed 3 wrong
    # (eos_bonus 4, alpha 1, both K): a longer output would have ended better.
    for seed in (0, 3):
        for K in (2, 3):
            model, src, finished = textbook(kind, eos_bonus, seed, K)
            outputs = beam_search(model, src, K, 10, BOS, EOS, alpha)
            assert outputs == [best(each, alpha) for each in finished], (seed, K)


@pytest.mark.parametrize("kind", ENCODER_DECODERS)
def test_outputs_are_the_same_alone_and_inside_a_padded_batch(kind):
    # Weights of the usual scale, so that attending to padding would change some outputs (it changes 7 of
    # encdec's 48 when cross-attention ignores the padding mask).
    lengths = [3, 9, 5, 1, 7, 2, 4, 6]
    for seed in range(3):
        model = ENCODER_DECODERS[kind](30, seed, scale=1.0)
        g = torch.Generator().manual_seed(seed)
        src = torch.full((len(lengths), max(lengths)), PAD)
        for row, n in enumerate(lengths):
            src[row, :n] = torch.randint(3, 30, (n,), generator=g)
        for K in (1, 4):
            together = beam_search(model, src, K, 12, BOS, EOS)
            alone = [beam_search(model, src[row : row + 1, :n], K, 12, BOS, EOS)[0] for row, n in enumerate(lengths)]
            assert together == alone, (seed, K)
        alone = [greedy(model, src[row : row + 1, :n], 12, BOS, EOS)[0] for row, n in enumerate(lengths)]
        assert greedy(model, src, 12, BOS, EOS) == alone, seed


class Recomputed:
    """A model whose decode() ignores the key/value cache: it keeps only the tokens so far (reordered with
    the beams as the cache would be) and runs the whole target again."""

    def __init__(self, model):
        self.model, self.config = model, model.config

    def encode(self, src):
        return self.model.encode(src)

    def new_cache(self):
        return [{"seen": {}}]

    def decode(self, tokens, memory, pad, cache):
        seen = cache[0]["seen"]
        seen["tokens"] = torch.cat([seen["tokens"], tokens], 1) if "tokens" in seen else tokens
        return self.model.decode(seen["tokens"], memory, pad)


@pytest.mark.parametrize("kind", ENCODER_DECODERS)
def test_cached_decoding_equals_recomputing_every_step(kind):
    model = ENCODER_DECODERS[kind](30, seed=3)
    src = torch.randint(3, 30, (6, 8), generator=torch.Generator().manual_seed(3))
    for K in (1, 3, 5):
        assert beam_search(model, src, K, 14, BOS, EOS) == beam_search(Recomputed(model), src, K, 14, BOS, EOS)
    assert greedy(model, src, 14, BOS, EOS) == greedy(Recomputed(model), src, 14, BOS, EOS)
    assert beam_search(model, src, 1, 14, BOS, EOS) == greedy(model, src, 14, BOS, EOS)  # beam 1 is greedy
