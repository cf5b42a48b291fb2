"""`python -m transformer_lab export` refuses a model no Transformers family here can express in one line that
names, for each family that could have taken the model, every setting it cannot express (QK-norm and logit
soft-capping among them), so one retraining can change them all. (Transformers itself is not needed here:
tests/unit/test_pretrained.py loads what an export writes.)"""

import pytest
import torch

V = 99
SMALL = dict(vocab_size=V, block_size=16, n_layer=1, n_head=2, n_embd=16)
REFUSED = "export: no Transformers architecture has this model's settings: "
QK = "no QK-norm (this model: model.qk_norm=true)"
CAP = "no logit soft-capping (this model: model.logit_softcap=30.0)"


def gpt(**settings):
    from transformer_lab.models.gpt import GPT, GPTConfig

    return GPT(GPTConfig(**SMALL, **settings))


def bert(**settings):
    from transformer_lab.models.bert import Bert, BertConfig

    return Bert(BertConfig(**SMALL, **settings))


def encdec(**settings):
    from transformer_lab.models.encdec import EncDec, EncDecConfig

    return EncDec(EncDecConfig(**SMALL, **settings))


CASES = {
    "qk-norm alone": (
        lambda: gpt(qk_norm=True),
        f"GPT-2 has {QK}; a Llama has model.pos_encoding=rope (this model: learned), model.norm=rmsnorm (this "
        f"model: layernorm), model.mlp=swiglu (this model: gelu), {QK}",
    ),
    "soft-capping alone": (
        lambda: gpt(logit_softcap=30.0),
        f"GPT-2 has {CAP}; a Llama has model.pos_encoding=rope (this model: learned), model.norm=rmsnorm (this "
        f"model: layernorm), model.mlp=swiglu (this model: gelu), {CAP}",
    ),
    "rmsnorm, qk-norm and soft-capping": (
        lambda: gpt(norm="rmsnorm", qk_norm=True, logit_softcap=30.0),
        f"GPT-2 has model.norm=layernorm (this model: rmsnorm), {QK}, {CAP}; a Llama has model.pos_encoding=rope "
        f"(this model: learned), model.mlp=swiglu (this model: gelu), {QK}, {CAP}",
    ),
    "a Llama with biases and GQA": (
        lambda: gpt(pos_encoding="rope", mlp="swiglu", n_kv_head=1, bias=True),
        "GPT-2 has model.pos_encoding=learned (this model: rope), no gated MLP (this model: model.mlp=swiglu), no "
        "grouped-query attention (this model: model.n_kv_head=1); a Llama has model.norm=rmsnorm (this model: "
        "layernorm), model.bias=false (this model: true)",
    ),
    "a pre-LN BERT classifier without biases pooling the mean": (
        lambda: bert(norm_first=True, bias=False, n_classes=3, pooling="mean"),
        "BERT has model.norm_first=false (this model: true), model.bias=true (this model: false), "
        "model.pooling=cls (this model: mean)",
    ),
    "a pre-LN BERT": (lambda: bert(norm_first=True), "BERT has model.norm_first=false (this model: true)"),
    "encdec's defaults": (
        lambda: encdec(),
        "Marian has model.norm_first=false (this model: true), model.sinusoid_layout=halves (this model: interleaved)",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_every_setting_a_family_cannot_express_is_named(case):
    from transformer_lab.errors import UserError
    from transformer_lab.pretrained.twin import family_for, settings_of

    build, message = CASES[case]
    model = build()
    with pytest.raises(UserError) as info:
        family_for(model, settings_of(model))
    assert str(info.value) == REFUSED + message


@pytest.mark.parametrize(
    "settings, family",
    [(dict(mlp="relu2"), "gpt2"), (dict(pos_encoding="rope", mlp="swiglu", norm="rmsnorm"), "llama")],
)
def test_a_model_a_family_expresses_has_nothing_named(settings, family):
    from transformer_lab.pretrained.twin import family_for, settings_of

    model = gpt(**settings)
    assert family_for(model, settings_of(model)).model_type == family


def test_the_command_says_it_in_one_line_and_writes_nothing(tmp_path, capsys):
    from transformer_lab.commands.export import main
    from transformer_lab.pretrained.load import MODELS
    from transformer_lab.pretrained.twin import settings_of
    from transformer_lab.store.checkpoint import FORMAT

    model = gpt(norm="rmsnorm", qk_norm=True, logit_softcap=30.0)
    meta = {
        "format": FORMAT,
        "config": {"model": {"_target_": MODELS["gpt"], "name": "gpt", **settings_of(model)}, "task": {}},
        "model_args": {},
        "vocab": [chr(c) for c in range(32, 32 + V)],
    }
    path = tmp_path / "ours.ckpt"
    torch.save({"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()}, "transformer_lab": meta}, path)
    with pytest.raises(SystemExit) as exit_:
        main([str(path), str(tmp_path / "out")])
    assert (
        exit_.value.code == 2
        and capsys.readouterr().err == f"error: {REFUSED}{CASES['rmsnorm, qk-norm and soft-capping'][1]}\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ours.ckpt"]
