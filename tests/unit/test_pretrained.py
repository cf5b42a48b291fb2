"""Transformers checkpoints in and out (pretrained/, commands/export.py): small random models of every family built
with Transformers itself, saved with save_pretrained, loaded with init_from=hf:DIR's code: the same logits
within 1e-5 (float32), the same greedy tokens through our KV cache as their generate(), and back out again.
Fine-tuning a Transformers checkpoint through train.py (then sampling, translating, classifying, exporting) is
tests/e2e/test_pretrained.py."""

from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

from helpers.runs import compose_cfg  # noqa: E402
from transformer_lab.config.classes import import_class  # noqa: E402
from transformer_lab.errors import ConfigError  # noqa: E402
from transformer_lab.pretrained.load import MODELS, load_state, open_checkpoint  # noqa: E402
from transformer_lab.store.checkpoint import FORMAT  # noqa: E402

V = 99


def randomised(model):
    """Every weight drawn anew (norm gains and biases too), so a tensor mapped to the wrong place shows."""
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "embed_positions" in name:  # Marian's sinusoids (fixed)
                continue
            p.normal_(1.0 if name.endswith(("LayerNorm.weight", "layernorm.weight", "layer_norm.weight", "norm.weight", "ln_1.weight", "ln_2.weight", "ln_f.weight")) else 0.0, 0.1)  # fmt: skip
    return model.eval()


def saved(model, tmp_path):
    model.save_pretrained(tmp_path)
    return f"hf:{tmp_path}"


def ours(source: str, **extra):
    checkpoint = open_checkpoint(source)
    cls = import_class(MODELS[checkpoint.family.model], "model._target_")
    model = cls(cls.config_class(**{**checkpoint.settings, "dropout": 0.0, **extra})).eval()
    report, misfits, _ = load_state(model, source)
    return model, report, misfits


def decoder_configs():
    common = dict(vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                  max_position_embeddings=64)  # fmt: skip
    return {
        "gpt2": lambda: transformers.GPT2LMHeadModel(
            transformers.GPT2Config(
                vocab_size=V,
                n_positions=64,
                n_embd=32,
                n_layer=2,
                n_head=4,
                resid_pdrop=0.0,
                embd_pdrop=0.0,
                attn_pdrop=0.0,
            )
        ),
        "gpt2-untied-relu": lambda: transformers.GPT2LMHeadModel(
            transformers.GPT2Config(
                vocab_size=V,
                n_positions=64,
                n_embd=32,
                n_layer=2,
                n_head=4,
                n_inner=40,
                activation_function="relu",
                tie_word_embeddings=False,
            )
        ),
        "gpt2-relu2": lambda: transformers.GPT2LMHeadModel(  # the speedrun's ReLU² is Transformers' "relu2"
            transformers.GPT2Config(
                vocab_size=V, n_positions=64, n_embd=32, n_layer=2, n_head=4, activation_function="relu2"
            )
        ),
        "llama-gqa": lambda: transformers.LlamaForCausalLM(
            transformers.LlamaConfig(**common, num_key_value_heads=2, rms_norm_eps=1e-6, rope_theta=500.0)
        ),
        "llama-tied": lambda: transformers.LlamaForCausalLM(
            transformers.LlamaConfig(**common, tie_word_embeddings=True)
        ),
        "mistral": lambda: transformers.MistralForCausalLM(
            transformers.MistralConfig(**common, num_key_value_heads=1, sliding_window=None)
        ),
        "qwen2": lambda: transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**common, num_key_value_heads=2)),
    }


@pytest.mark.parametrize("family", list(decoder_configs()))
def test_decoders_give_transformers_logits_and_greedy_tokens(family, tmp_path):
    theirs = randomised(decoder_configs()[family]())
    model, report, misfits = ours(saved(theirs, tmp_path))
    assert misfits == [], report
    idx = torch.randint(0, V, (3, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = theirs(idx).logits
    torch.testing.assert_close(model(idx), expected, atol=1e-5, rtol=1e-5)
    prompt = idx[:, :5]
    generated = theirs.generate(prompt, max_new_tokens=12, do_sample=False, eos_token_id=None, pad_token_id=0)
    assert torch.equal(model.generate(prompt, 12, temperature=0), generated)  # through our KV cache


def test_bert_masked_lm_and_classifier_logits(tmp_path):
    config = transformers.BertConfig(vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=64, max_position_embeddings=40, hidden_dropout_prob=0.0,
                                     attention_probs_dropout_prob=0.0)  # fmt: skip
    idx = torch.randint(1, V, (3, 17), generator=torch.Generator().manual_seed(1))
    idx[0, 12:] = 0  # padding (BERT's pad id)
    mask = (idx != 0).long()
    mlm = randomised(transformers.BertForMaskedLM(config))
    model, report, misfits = ours(saved(mlm, tmp_path / "mlm"))
    assert misfits == [], report
    with torch.no_grad():
        expected = mlm(idx, attention_mask=mask).logits
    real = mask.bool()
    torch.testing.assert_close(model(idx)[real], expected[real], atol=1e-5, rtol=1e-5)

    classifier = randomised(
        transformers.BertForSequenceClassification(config.__class__(**config.to_dict(), num_labels=3))
    )
    model, report, misfits = ours(saved(classifier, tmp_path / "cls"), n_classes=3)
    assert misfits == [], report
    with torch.no_grad():
        expected = classifier(idx, attention_mask=mask).logits
    torch.testing.assert_close(model(idx), expected, atol=1e-5, rtol=1e-5)

    # The masked LM's encoder starts a classifier: the pooler and the head are new, said so.
    model, report, misfits = ours(f"hf:{tmp_path / 'mlm'}", n_classes=5)
    assert set(misfits) >= {"head.weight", "head.bias", "pooler.weight", "pooler.bias"}, report
    assert "left as initialised" in report


def greedy(model, src, start: int, steps: int):
    """Greedy decoding through our key/value cache, one token at a time."""
    memory, pad = model.encode(src)
    cache, out = model.new_cache(), torch.full((len(src), 1), start)
    for _ in range(steps):
        logits = model.decode(out[:, -1:], memory, pad, cache)[:, -1]
        logits[:, start] = float("-inf")  # never the start (pad) token, as Transformers' suppress_tokens below
        out = torch.cat([out, logits.argmax(-1, keepdim=True)], dim=1)
    return out


def seq2seq_configs():
    t5 = dict(vocab_size=V, d_model=32, d_ff=64, num_layers=2, num_decoder_layers=3, num_heads=4, dropout_rate=0.0)
    marian = dict(
        vocab_size=V,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=64,
        pad_token_id=V - 1,
        decoder_start_token_id=V - 1,
        eos_token_id=1,
        dropout=0.0,
        scale_embedding=True,
    )  # fmt: skip  (opus-mt models scale; the class default does not)
    return {
        "t5": (lambda: transformers.T5ForConditionalGeneration(transformers.T5Config(**t5, d_kv=8)), 0),
        "t5-v1.1": (
            lambda: transformers.T5ForConditionalGeneration(
                transformers.T5Config(**t5, d_kv=16, feed_forward_proj="gated-gelu", tie_word_embeddings=False)
            ),
            0,
        ),
        "marian": (
            lambda: transformers.MarianMTModel(transformers.MarianConfig(**marian, activation_function="swish")),
            V - 1,
        ),
        "marian-gelu-unshared": (
            lambda: transformers.MarianMTModel(
                transformers.MarianConfig(**marian, activation_function="gelu", share_encoder_decoder_embeddings=False)
            ),
            V - 1,
        ),
    }


@pytest.mark.parametrize("family", list(seq2seq_configs()))
def test_encoder_decoders_give_transformers_logits_and_greedy_tokens(family, tmp_path):
    make, pad = seq2seq_configs()[family]
    theirs = make()
    randomised(theirs)
    model, report, misfits = ours(saved(theirs, tmp_path))
    assert misfits == [], report
    g = torch.Generator().manual_seed(1)
    src = torch.randint(2, V - 1, (3, 11), generator=g)
    src[1, 7:] = pad
    tgt = torch.cat([torch.full((3, 1), pad), torch.randint(2, V - 1, (3, 8), generator=g)], dim=1)
    mask = (src != pad).long()
    with torch.no_grad():
        expected = theirs(input_ids=src, attention_mask=mask, decoder_input_ids=tgt).logits
    torch.testing.assert_close(model(src, tgt), expected, atol=1e-5, rtol=1e-5)
    generated = theirs.generate(
        input_ids=src,
        attention_mask=mask,
        max_new_tokens=10,
        do_sample=False,
        num_beams=1,
        eos_token_id=None,
        decoder_start_token_id=pad,
        suppress_tokens=[pad],
        forced_eos_token_id=None,
        bad_words_ids=None,
        use_cache=False,
    )  # fmt: skip  (their cache assumes as many decoder layers as encoder)
    assert torch.equal(greedy(model, src, pad, 10), generated)


def test_unmappable_configs_are_refused_in_one_line(tmp_path):
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=V, n_positions=16, n_embd=16, n_layer=1,
                                                                 n_head=2, activation_function="silu"))  # fmt: skip
    with pytest.raises(ConfigError) as info:
        open_checkpoint(saved(gpt2, tmp_path / "gpt2"))
    assert info.value.key == "init_from" and "activation_function='silu'" in str(info.value)
    scaled = transformers.LlamaConfig(vocab_size=V, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                      num_attention_heads=2, rope_scaling={"rope_type": "linear", "factor": 2.0})  # fmt: skip
    transformers.LlamaForCausalLM(scaled).save_pretrained(tmp_path / "llama")
    with pytest.raises(ConfigError, match="rope scaling 'linear'"):
        open_checkpoint(f"hf:{tmp_path / 'llama'}")
    bart = transformers.BartConfig(vocab_size=V, d_model=16, encoder_layers=1, decoder_layers=1)
    transformers.BartForConditionalGeneration(bart).save_pretrained(tmp_path / "bart")
    with pytest.raises(ConfigError, match="model_type 'bart' is not one mapped here"):
        open_checkpoint(f"hf:{tmp_path / 'bart'}")
    with pytest.raises(ConfigError, match="no Transformers model directory"):
        open_checkpoint(f"hf:{tmp_path / 'nothing-here'}")


# ---------------------------------------------------------------------------------------------------------
# Export: our checkpoint -> a Transformers directory -> from_pretrained


def bpe_tokenizer(specials=("<pad>", "</s>", "<unk>")):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer, tokenizer.decoder = pre_tokenizers.ByteLevel(), decoders.ByteLevel()
    text = ["the quick brown fox jumps over the lazy dog", "a stitch in time saves nine"] * 20
    tokenizer.train_from_iterator(text, trainers.BpeTrainer(vocab_size=V, special_tokens=list(specials)))
    return tokenizer


def our_checkpoint(model, tmp_path, tokenizer):
    """A checkpoint as train.py writes one (its model section, weights and tokenizer), without training."""
    from transformer_lab.data.tokenizers import HFTokenizer
    from transformer_lab.pretrained.twin import settings_of

    option = next(name for name, target in MODELS.items() if target.endswith(type(model).__qualname__))
    meta = {
        "format": FORMAT,
        "config": {
            "model": {"_target_": MODELS[option], "name": option, **settings_of(model)},
            "task": {},
        },
        "model_args": {},
        "tokenizer": HFTokenizer(tokenizer, "</s>").to_json(),
    }
    path = tmp_path / "ours.ckpt"
    torch.save({"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()}, "transformer_lab": meta}, path)
    return path


EXPORTS = {
    "gpt2": (lambda: decoder_configs()["gpt2"](), "AutoModelForCausalLM"),
    "llama-gqa": (lambda: decoder_configs()["llama-gqa"](), "AutoModelForCausalLM"),
    "qwen2": (lambda: decoder_configs()["qwen2"](), "AutoModelForCausalLM"),
    "t5": (lambda: seq2seq_configs()["t5"][0](), "AutoModelForSeq2SeqLM"),
    "marian": (lambda: seq2seq_configs()["marian"][0](), "AutoModelForSeq2SeqLM"),
}


@pytest.mark.parametrize("family", list(EXPORTS))
def test_export_then_from_pretrained_gives_the_same_logits(family, tmp_path):
    from transformer_lab.commands.export import export

    make, auto = EXPORTS[family]
    original = randomised(make())
    model, _, misfits = ours(saved(original, tmp_path / "in"))
    assert misfits == []
    tokenizer = bpe_tokenizer()
    out = export(our_checkpoint(model, tmp_path, tokenizer), tmp_path / "out")
    exported = getattr(transformers, auto).from_pretrained(out).eval()
    assert type(exported) is type(original)
    src = torch.randint(2, V - 1, (2, 9), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        if auto == "AutoModelForCausalLM":
            got, want, mine = exported(src).logits, original(src).logits, model(src)
        else:
            tgt = src[:, :5]
            got, want = (
                exported(input_ids=src, decoder_input_ids=tgt).logits,
                original(input_ids=src, decoder_input_ids=tgt).logits,
            )
            mine = model(src, tgt)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got, mine, atol=1e-5, rtol=1e-5)
    loaded = transformers.AutoTokenizer.from_pretrained(out)
    if family == "qwen2":  # Transformers 5 loads a qwen2 directory with Qwen2Tokenizer, whatever it declares,
        return  # which re-makes the pre-tokenizer as Qwen's: the ids of another BPE differ (closing note)
    text = "the lazy fox saves time"
    ids = tokenizer.encode(text).ids
    assert loaded(text)["input_ids"] == ids and loaded.decode(ids) == tokenizer.decode(ids), type(loaded)


def test_bert_export_round_trips_masked_lm_and_classifier(tmp_path):
    from transformer_lab.commands.export import export
    from transformer_lab.models.bert import Bert, BertConfig

    torch.manual_seed(0)
    tokenizer = bpe_tokenizer(("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"))
    for n_classes, auto in ((None, "AutoModelForMaskedLM"), (4, "AutoModelForSequenceClassification")):
        model = Bert(BertConfig(vocab_size=V, n_classes=n_classes, block_size=32, n_layer=2, n_head=4, n_embd=32,
                                dropout=0.0, norm_eps=1e-12)).eval()  # fmt: skip
        randomised(model)
        folder = tmp_path / str(n_classes)
        folder.mkdir()
        out = export(our_checkpoint(model, folder, tokenizer), folder / "out")
        exported = getattr(transformers, auto).from_pretrained(out).eval()
        idx = torch.randint(5, V, (2, 12), generator=torch.Generator().manual_seed(3))
        idx[1, 8:] = 0
        with torch.no_grad():
            got = exported(idx, attention_mask=(idx != 0).long()).logits
        mine = model(idx)
        if n_classes is None:
            got, mine = got[idx != 0], mine[idx != 0]
        torch.testing.assert_close(got, mine, atol=1e-5, rtol=1e-5)


def test_a_model_no_transformers_architecture_expresses_is_refused_by_name(tmp_path):
    from transformer_lab.commands.export import export
    from transformer_lab.errors import UserError
    from transformer_lab.models.gpt import GPT, GPTConfig

    model = GPT(GPTConfig(vocab_size=V, block_size=16, n_layer=1, n_head=2, n_embd=16, norm="rmsnorm"))
    with pytest.raises(UserError) as info:
        export(our_checkpoint(model, tmp_path, bpe_tokenizer()), tmp_path / "out")
    assert str(info.value) == (  # every setting of each family (commands/export.py's check: test_export_refusal.py)
        "export: no Transformers architecture has this model's settings: GPT-2 has model.norm=layernorm (this model: "
        "rmsnorm); a Llama has model.pos_encoding=rope (this model: learned), model.mlp=swiglu (this model: gelu)"
    )


def test_the_speedrun_options_load_off_export_relu2_and_refuse_the_rest_by_name(tmp_path):
    from transformer_lab.commands.export import export
    from transformer_lab.errors import UserError
    from transformer_lab.models.gpt import GPT, GPTConfig
    from transformer_lab.pretrained.load import apply

    model = randomised(GPT(GPTConfig(vocab_size=V, block_size=16, n_layer=2, n_head=2, n_embd=16, mlp="relu2",
                                     zero_init_projections=True)))  # fmt: skip
    out = export(our_checkpoint(model, tmp_path, bpe_tokenizer()), tmp_path / "out")
    exported = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    assert exported.config.activation_function == "relu2"
    idx = torch.randint(0, V, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(exported(idx).logits, model(idx), atol=1e-5, rtol=1e-5)
    for options, named in (
        (dict(qk_norm=True), "GPT-2 has no QK-norm (this model: model.qk_norm=true);"),
        (dict(logit_softcap=30.0), "GPT-2 has no logit soft-capping (this model: model.logit_softcap=30.0);"),
        (dict(qk_norm=True, logit_softcap=30.0), "GPT-2 has no QK-norm (this model: model.qk_norm=true), no logit "
                                                 "soft-capping (this model: model.logit_softcap=30.0);"),
    ):  # fmt: skip
        other = GPT(GPTConfig(vocab_size=V, block_size=16, n_layer=1, n_head=2, n_embd=16, **options))
        folder = tmp_path / "-".join(options)
        folder.mkdir()
        with pytest.raises(UserError) as info:
            export(our_checkpoint(other, folder, bpe_tokenizer()), folder / "out")
        assert named in str(info.value)
    tokenizer, hub = bpe_tokenizer(), tmp_path / "hub"
    transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=tokenizer.get_vocab_size(), n_positions=32,
                                                         n_embd=16, n_layer=1, n_head=2)).save_pretrained(hub)  # fmt: skip
    tokenizer.save(str(hub / "tokenizer.json"))
    overrides = ["data=text", "data.path=x.txt", f"init_from=hf:{hub}", f"data.tokenizer={hub / 'tokenizer.json'}"]
    cfg, added = apply(compose_cfg(overrides), overrides)
    assert cfg.model.qk_norm is False and cfg.model.logit_softcap is None and "model.qk_norm=false" in added
    for extra in ("model.qk_norm=true", "model.logit_softcap=30", "model.zero_init_projections=true"):
        key = extra.split("=")[0]
        with pytest.raises(ConfigError, match=rf"^{key}: hf:.* has {key.split('.')[1]}=.*: leave {key} out"):
            apply(compose_cfg([*overrides, extra]), [*overrides, extra])


def test_a_gpt_without_biases_exports_as_gpt2_with_zero_biases(tmp_path):
    from transformer_lab.commands.export import export
    from transformer_lab.models.gpt import GPT, GPTConfig

    model = randomised(GPT(GPTConfig(vocab_size=V, block_size=16, n_layer=2, n_head=2, n_embd=16, bias=False)))
    exported = transformers.AutoModelForCausalLM.from_pretrained(
        export(our_checkpoint(model, tmp_path, bpe_tokenizer()), tmp_path / "out")
    ).eval()
    assert type(exported).__name__ == "GPT2LMHeadModel"
    assert not exported.transformer.h[0].attn.c_attn.bias.any()
    idx = torch.randint(0, V, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(exported(idx).logits, model(idx), atol=1e-5, rtol=1e-5)


def test_export_checks_its_directory_first_and_replaces_it_whole_only_when_asked(tmp_path):
    from transformer_lab.commands.export import export
    from transformer_lab.errors import UserError
    from transformer_lab.models.gpt import GPT, GPTConfig

    model = GPT(GPTConfig(vocab_size=V, block_size=16, n_layer=1, n_head=2, n_embd=16))
    ckpt = our_checkpoint(model, tmp_path, bpe_tokenizer())
    (tmp_path / "a-file").write_text("mine\n")
    with pytest.raises(UserError, match=r"^export: .*a-file is a file, not a directory: give a directory"):
        export(ckpt, tmp_path / "a-file")
    with pytest.raises(UserError, match=r"^export: cannot create .*a-file/out: .*a-file is a file$"):
        export(ckpt, tmp_path / "a-file" / "out")
    base = tmp_path / "base"  # the model a run was fine-tuned from: other files than an export writes
    base.mkdir()
    for name, data in (("pytorch_model.bin", b"their weights"), ("vocab.json", b"{}"), ("config.json", b"{}")):
        (base / name).write_bytes(data)
    with pytest.raises(UserError, match=r"is not empty \(config.json, pytorch_model.bin, vocab.json\): choose"):
        export(ckpt, base)
    assert sorted(p.name for p in base.iterdir()) == ["config.json", "pytorch_model.bin", "vocab.json"]
    assert (base / "config.json").read_bytes() == b"{}"
    readonly = tmp_path / "readonly"
    readonly.mkdir()
    readonly.chmod(0o555)
    if not __import__("os").access(readonly, __import__("os").W_OK):  # (root writes anywhere)
        with pytest.raises(UserError, match="cannot write into"):
            export(ckpt, readonly / "out")
    # overwrite=true never replaces what is not a model directory, what holds the checkpoint, or the working directory
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("mine\n")
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.json").write_text("{}")
    (run / "summary.json").write_text("{}")
    link = tmp_path / "link"
    link.symlink_to(base)
    outer = tmp_path / "outer"  # a model directory with a run (and notes) inside it
    outer.mkdir()
    (outer / "config.json").write_text("{}")
    (outer / "notes.txt").write_text("mine\n")
    (outer / "run").mkdir()
    (outer / "run" / "summary.json").write_text("{}")
    (tmp_path / "no-config").mkdir()
    (tmp_path / "no-config" / "vocab.json").write_text("{}")
    for out, message in (
        (tmp_path / "notes", r"notes holds todo.txt: not a model directory overwrite=true replaces \(it deletes"),
        (run, "run holds checkpoints/, summary.json: not a model directory"),
        (outer, "outer holds notes.txt, run/: not a model directory"),
        (tmp_path / "no-config", "no-config has no config.json: not a model directory"),
        (tmp_path, f"overwrite=true would delete {tmp_path}, what holds {ckpt}"),
        (link, "is a symbolic link: give the directory itself"),
        (Path.cwd(), "the working directory or one above it"),
        (Path.cwd().parent, "the working directory or one above it"),
        (Path.home(), "your home directory"),
    ):
        with pytest.raises(UserError, match=message):
            export(ckpt, out, overwrite=True)
    assert (tmp_path / "notes" / "todo.txt").exists() and (run / "summary.json").exists() and link.is_symlink()
    assert (outer / "run" / "summary.json").exists() and (outer / "notes.txt").exists()
    export(ckpt, base, overwrite=True)  # asked: the directory is the export's alone
    assert sorted(p.name for p in base.iterdir()) == [
        "config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"
    ]  # fmt: skip
    empty = tmp_path / "empty"
    empty.mkdir()
    export(ckpt, empty)  # an empty directory is new enough
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no staging left behind
    assert {oct(p.stat().st_mode & 0o777) for p in empty.iterdir()} == {oct(0o666 & ~0o022)}  # (umask 022)


def test_a_checkpoint_cut_short_or_without_a_tokenizer_is_refused_before_the_run(tmp_path):
    from transformer_lab.errors import UserError
    from transformer_lab.pretrained.hub import read_tensors
    from transformer_lab.pretrained.load import apply

    hub, named = tmp_path / "gpt2", tmp_path / "tokenizer.json"
    bpe_tokenizer().save(str(named))
    rows = bpe_tokenizer().get_vocab_size()  # the embedding's rows: the named tokenizer's ids
    transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=rows, n_positions=32, n_embd=16, n_layer=1,
                                                         n_head=2)).save_pretrained(hub)  # fmt: skip
    text = ["data=text", "data.path=x.txt", f"init_from=hf:{hub}"]
    for overrides, message in (
        (text, "has no tokenizer.json, and data.tokenizer=bpe would read text with a tokenizer made here"),
        ([*text, "data.tokenizer=char"], "and data.tokenizer=char would read text"),
        (["data=shakespeare", f"init_from=hf:{hub}"], "data=shakespeare reads text with a vocabulary of its own"),
        (["model=bert", "data=labelled", "data.path=x.tsv", f"init_from=hf:{hub}"], "loads into model=gpt"),
    ):
        with pytest.raises(UserError, match=message):
            apply(compose_cfg(overrides), list(overrides))
    cfg, _ = apply(compose_cfg([*text, f"data.tokenizer={named}"]), [*text, f"data.tokenizer={named}"])
    assert cfg.data.tokenizer == str(named)
    small = tmp_path / "small.json"
    from tokenizers import Tokenizer, models

    Tokenizer(models.WordLevel({"a": 0, "b": 1, "<unk>": 2}, unk_token="<unk>")).save(str(small))
    with pytest.raises(ConfigError, match=rf"^data.tokenizer: .*small.json has 4 ids, hf:.*'s embedding {rows} rows"):
        apply(compose_cfg([*text, f"data.tokenizer={small}"]), [*text, f"data.tokenizer={small}"])

    weights = hub / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])  # a download cut short
    for cut in (lambda: read_tensors(hub), lambda: apply(compose_cfg([*text, f"data.tokenizer={named}"]), [])):
        with pytest.raises(UserError, match=r"model.safetensors is [\d,]+ bytes, its header says [\d,]+: truncated"):
            cut()
    weights.write_bytes(b"\x05")
    with pytest.raises(UserError, match="is not a readable safetensors file"):
        read_tensors(hub)


def test_a_character_level_gpt_exports_with_a_tokenizer_transformers_reads(tmp_path):
    """tiny Shakespeare's default run (model=gpt, characters, no biases): the README's export example."""
    from transformer_lab.commands.export import export
    from transformer_lab.models.gpt import GPT, GPTConfig

    chars = sorted(set("First Citizen:\nBefore we proceed any further, hear me speak.\n"))
    model = randomised(GPT(GPTConfig(vocab_size=len(chars), block_size=16, n_layer=1, n_head=2, n_embd=16, bias=False)))
    path = our_checkpoint(model, tmp_path, bpe_tokenizer())
    checkpoint = torch.load(path, weights_only=True)
    del checkpoint["transformer_lab"]["tokenizer"]
    checkpoint["transformer_lab"]["vocab"] = chars  # as data=shakespeare writes it
    torch.save(checkpoint, path)
    out = export(path, tmp_path / "out")
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    text = "Before we,\nhear."
    ids = tokenizer(text)["input_ids"]
    assert ids == [chars.index(c) for c in text] and tokenizer.decode(ids) == text
    exported = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    assert exported.config.eos_token_id is None  # (not GPT2Config's 50256: no such id here)
    with torch.no_grad():
        torch.testing.assert_close(
            exported(torch.tensor([ids])).logits, model(torch.tensor([ids])), atol=1e-5, rtol=1e-5
        )


def test_a_checkpoint_directory_is_checked_whole_before_the_run(tmp_path):
    import shutil

    from transformer_lab.config.classes import check_buildable
    from transformer_lab.errors import UserError
    from transformer_lab.pretrained.load import apply

    tokenizer = bpe_tokenizer()
    rows = tokenizer.get_vocab_size()
    hub = tmp_path / "gpt2"
    transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=rows, n_positions=32, n_embd=16, n_layer=1,
                                                         n_head=2)).save_pretrained(hub)  # fmt: skip
    tokenizer.save(str(hub / "tokenizer.json"))

    def prepared(folder, *extra):
        overrides = ["data=text", "data.path=x.txt", "data.block_size=32", f"init_from=hf:{folder}", *extra]
        cfg, _ = apply(compose_cfg(overrides), overrides)
        return check_buildable(cfg)

    prepared(hub, f"data.tokenizer={hub / 'tokenizer.json'}")  # its own tokenizer, named by its file: fine
    with pytest.raises(ConfigError, match=r"^data.block_size: sequences of 64 tokens exceed the 32 positions of hf:"):
        prepared(hub, "data.block_size=64")

    def variant(name, change):
        folder = tmp_path / name
        shutil.copytree(hub, folder)
        change(folder)
        return folder

    cases = {
        "a list": (lambda f: (f / "config.json").write_text("[1, 2]"), "config.json holds a list, not a model's"),
        "a bigger tokenizer": (
            lambda f: transformers.GPT2Config(
                vocab_size=rows - 10, n_positions=32, n_embd=16, n_layer=1, n_head=2
            ).to_json_file(f / "config.json"),
            rf"tokenizer.json has {rows:,} ids, its embedding {rows - 10:,} rows",
        ),
        "a broken tokenizer": (lambda f: (f / "tokenizer.json").write_text("{"), "tokenizer.json does not load as a"),
        "a missing shard": (
            lambda f: (f / "model.safetensors.index.json").write_text('{"weight_map": {"a": "model-2.safetensors"}}'),
            "names model-2.safetensors, which",
        ),
        "a .bin cut short": (
            lambda f: (
                (f / "model.safetensors").unlink()
                or torch.save({"w": torch.zeros(1000)}, f / "pytorch_model.bin")
                or (f / "pytorch_model.bin").write_bytes((f / "pytorch_model.bin").read_bytes()[:2000])
            ),
            r"pytorch_model.bin is not a readable checkpoint \(truncated or corrupt",
        ),
    }
    for name, (change, message) in cases.items():
        with pytest.raises(UserError, match=message):
            prepared(variant(name.replace(" ", "_"), change))


def test_an_exported_encoder_decoder_starts_its_decoder_where_the_run_does(trained, tmp_path):
    """Transformers' generate() starts the decoder at config.decoder_start_token_id: an export writes the run's own
    <bos> there (its data's; the pad id is T5's and Marian's convention, not what a run here trained from), so the
    exported model's greedy output is the run's."""
    import transformers

    import transformer_lab
    from transformer_lab.commands.export import export

    run = transformer_lab.load(trained("t5_translation"))
    bos = run.datamodule.data.specials.bos
    assert bos != run.datamodule.data.specials.pad  # (a vocabulary learned here: <pad> 0, <bos> 1)
    exported = transformers.AutoModelForSeq2SeqLM.from_pretrained(export(run.path, tmp_path / "out")).eval()
    assert exported.config.decoder_start_token_id == bos
    source = torch.tensor([run.encode("Ein Mann fährt Fahrrad.")])
    with torch.no_grad():
        theirs = exported.generate(source, max_new_tokens=6, do_sample=False, num_beams=1, eos_token_id=None)
        target = torch.tensor([[bos]])  # the run's own greedy tokens, step by step from its <bos>
        for _ in range(6):
            target = torch.cat([target, run.model(source, target)[:, -1:].argmax(-1)], 1)
    assert torch.equal(theirs, target)


def test_export_on_a_full_disk_is_one_line_and_leaves_the_earlier_export_and_no_staging(tmp_path, monkeypatch):
    """safetensors reports a full disk in its own exception type; export writes through the writer's staging
    folder, so the message is one line and the export already there is untouched."""
    import safetensors.torch

    from transformer_lab.commands.export import export
    from transformer_lab.errors import UserError

    model, _, _ = ours(saved(randomised(EXPORTS["gpt2"][0]()), tmp_path / "in"))
    checkpoint = our_checkpoint(model, tmp_path, bpe_tokenizer())
    out = export(checkpoint, tmp_path / "out")
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    class SafetensorError(Exception):  # (safetensors_rust's own, as it words a full disk)
        pass

    def disk_full(tensors, filename, metadata=None):
        with open(filename, "wb") as f:
            f.write(b"half a header")
        raise SafetensorError(
            'Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left on device" })'
        )

    monkeypatch.setattr(safetensors.torch, "save_file", disk_full)
    with pytest.raises(UserError) as refused:
        export(checkpoint, out, overwrite=True)
    assert str(refused.value) == f"export: cannot write {out} (No space left on device); nothing there was changed"
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in", "ours.ckpt", "out"]
