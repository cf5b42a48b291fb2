"""Model FLOPs from the architecture (for throughput/mfu) against torch's own count, and the devices' peaks."""

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from transformer_lab.callbacks.throughput import device_peak_flops
from transformer_lab.models.bert import Bert, BertConfig
from transformer_lab.models.encdec import EncDec, EncDecConfig
from transformer_lab.models.gpt import GPT, GPTConfig
from transformer_lab.models.t5 import T5, T5Config


def counted_flops(step) -> int:
    """FLOPs torch counts while `step` runs (SDPA's math kernel, whose matmuls the counter sees)."""
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        step()
    return counter.get_total_flops()


def forward_and_backward(model, *inputs):
    return lambda: model(*inputs).float().pow(2).mean().backward()


SMALL = dict(n_head=2, n_embd=16)
B, S, T = 3, 20, 11


@pytest.mark.parametrize(
    "config",
    [
        GPTConfig(vocab_size=50, block_size=32, n_layer=2, **SMALL),
        GPTConfig(
            vocab_size=50, block_size=32, n_layer=3, mlp="swiglu", pos_encoding="rope", tie_weights=False, **SMALL
        ),
    ],
    ids=["gelu", "swiglu-rope-untied"],
)
def test_gpt_flops_match_torch_count(config):
    model, idx = GPT(config), torch.randint(0, 50, (B, S))
    assert counted_flops(lambda: model(idx)) == B * model.forward_flops(S)
    assert counted_flops(forward_and_backward(model, idx)) == 3 * B * model.forward_flops(S)


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_bert_flops_match_torch_count(pooling):
    model = Bert(BertConfig(vocab_size=50, n_classes=7, block_size=32, n_layer=2, pooling=pooling, **SMALL))
    idx = torch.randint(0, 50, (B, S))
    assert counted_flops(lambda: model(idx)) == B * model.forward_flops(S)
    assert counted_flops(forward_and_backward(model, idx)) == 3 * B * model.forward_flops(S)


@pytest.mark.parametrize(
    "model",
    [
        EncDec(EncDecConfig(vocab_size=50, src_vocab_size=40, block_size=32, n_layer=2, n_decoder_layer=3, **SMALL)),
        T5(T5Config(vocab_size=50, n_layer=2, n_decoder_layer=3, d_ff=24, feed_forward="gated-gelu", **SMALL)),
    ],
    ids=["encdec", "t5"],
)
def test_encoder_decoder_flops_match_torch_count(model):
    src, tgt = torch.randint(1, 40, (B, S)), torch.randint(1, 50, (B, T))  # source and target lengths differ
    assert counted_flops(lambda: model(src, tgt)) == B * model.forward_flops(S, T)
    assert counted_flops(forward_and_backward(model, src, tgt)) == 3 * B * model.forward_flops(S, T)


def test_gpt_flops_follow_the_usual_6n_formula():
    # Kaplan et al. / nanoGPT: 6 x (matmul weights, output layer included) + 12 x layers x width x context
    config = GPTConfig(vocab_size=65, block_size=256, n_layer=6, n_head=6, n_embd=384)
    model = GPT(config)
    n_matmul = model.num_params() - model.wte.weight.numel() + config.vocab_size * config.n_embd
    n_matmul -= sum(p.numel() for name, p in model.named_parameters() if "ln" in name)  # LayerNorm gains
    assert 3 * model.forward_flops(256) / 256 == 6 * n_matmul + 12 * 6 * 384 * 256


GPUS = {  # the name torch reports, and the compute capability
    "h100": ("NVIDIA H100 80GB HBM3", (9, 0)),
    "a100": ("NVIDIA A100-SXM4-80GB", (8, 0)),
    "h200": ("NVIDIA H200", (9, 0)),
}


def test_gpu_peak_follows_the_precision_in_use(monkeypatch):
    def peak(gpu, precision, float32_matmul="high"):  # "high": what runs on CUDA set (TF32)
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: GPUS[gpu][0])
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: GPUS[gpu][1])
        monkeypatch.setattr(torch, "get_float32_matmul_precision", lambda: float32_matmul)
        return device_peak_flops(torch.device("cuda", 0), precision)

    for gpu in GPUS:
        half = peak(gpu, "bf16-mixed")
        assert peak(gpu, "16-mixed") == peak(gpu, "bf16-true") == half  # fp16 and bf16 share the tensor cores
        assert peak(gpu, "32-true") == pytest.approx(half / 2, rel=0.01)  # TF32: half the 16-bit rate (dense)
        assert peak(gpu, "32-true", "highest") < half / 10  # true fp32: no tensor cores
    # The H200 has the H100 SXM's GH100 compute at the same clocks (only its memory differs): the table kept
    # here for it agrees with Lightning's for the H100, at every precision.
    for precision, matmul in (
        ("bf16-mixed", "high"),
        ("16-mixed", "high"),
        ("32-true", "high"),
        ("32-true", "highest"),
    ):
        assert peak("h200", precision, matmul) == pytest.approx(peak("h100", precision, matmul), rel=0.01)
    assert peak("a100", "bf16-mixed") == 312e12  # NVIDIA's A100 datasheet, dense


def test_no_peak_on_a_cpu():
    assert device_peak_flops(torch.device("cpu"), "32-true") is None
