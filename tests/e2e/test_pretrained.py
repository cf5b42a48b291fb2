"""Fine-tuning from a Transformers checkpoint in one command, through train.py: small stand-ins for the hub's
gpt2, t5 and bert (saved with save_pretrained, with a tokenizer.json), trained with init_from=hf:DIR, then
sampled, translated, classified and exported, and read back with from_pretrained. Loading and exporting each
family's checkpoint without training (the same logits, the refusals) is tests/unit/test_pretrained.py."""

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

from helpers.runs import ROOT, SHAKESPEARE, needs_shakespeare, run_command, run_train  # noqa: E402


def gpt2_stand_in(folder):
    """A small GPT-2 directory as the hub's: config.json, model.safetensors and a byte-level tokenizer.json."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())  # fmt: skip
    tokenizer.train([str(SHAKESPEARE)], trainer)
    config = transformers.GPT2Config(
        vocab_size=tokenizer.get_vocab_size(), n_positions=64, n_embd=32, n_layer=2, n_head=2
    )
    torch.manual_seed(0)  # (its weights, the same whichever tests ran before in this worker)
    transformers.GPT2LMHeadModel(config).save_pretrained(folder)
    tokenizer.save(str(folder / "tokenizer.json"))
    return tokenizer


@needs_shakespeare
def test_fine_tune_a_transformers_gpt2_on_text_sample_and_export_it(tmp_path):

    hub = tmp_path / "gpt2"
    tokenizer = gpt2_stand_in(hub)
    run_dir = tmp_path / "run"
    common = ["model=gpt", "data=text", f"data.path={SHAKESPEARE}", f"data.cache_dir={tmp_path / 'cache'}",
              "data.block_size=32", "data.batch_size=8", "data.val_fraction=0.1", f"init_from=hf:{hub}"]  # fmt: skip
    refused = run_train(*common, "model.n_layer=3", f"hydra.run.dir={tmp_path / 'refused'}")
    assert refused.returncode == 2 and "model.n_layer: hf:" in refused.stderr and "has n_layer=2" in refused.stderr
    assert "Traceback" not in refused.stderr

    result = run_train(*common, "optim.lr=3e-3", "optim.pretrained_lr=1e-3", "trainer.max_steps=40",
                       "trainer.val_check_interval=20", "trainer.limit_val_batches=4", "logger=csv",
                       "trainer.enable_progress_bar=false", f"hydra.run.dir={run_dir}")  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    log = result.stdout + result.stderr
    assert f"init_from hf:{hub} (gpt2, {hub}): loaded 29 of 29 tensors" in log  # every tensor, nothing left
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    val = [line["val/loss"] for line in lines if "val/loss" in line]
    assert len(val) == 2 and val[-1] < val[0]
    cfg = (run_dir / ".hydra" / "config.yaml").read_text()
    assert "mlp: gelu-tanh" in cfg and "n_layer: 2" in cfg and f"tokenizer: {hub}" in cfg

    sample = run_command("sample", run_dir, "prompt=ROMEO:", "max_new_tokens=10")
    assert sample.returncode == 0 and sample.stdout.startswith("ROMEO:"), sample.stderr[-2000:]

    from transformer_lab.commands.export import export
    from transformer_lab.run.build import load_model
    from transformer_lab.store.checkpoint import checkpoint_of

    out = export(run_dir, tmp_path / "exported")
    exported = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    model, _ = load_model(checkpoint_of(run_dir))
    ids = torch.tensor([tokenizer.encode("ROMEO: what light").ids])
    with torch.no_grad():
        torch.testing.assert_close(exported(ids).logits, model(ids), atol=1e-5, rtol=1e-5)
    assert transformers.AutoTokenizer.from_pretrained(out)("ROMEO: what light")["input_ids"] == ids[0].tolist()


def multi30k_lines(n: int):
    """Multi30k's first n training sentences of a language file (train.de.gz, ...), from data/."""
    import gzip

    multi30k = ROOT / "data" / "multi30k"
    if not (multi30k / "train.de.gz").is_file():
        pytest.skip("no Multi30k in data/ (make data)")
    return lambda name: gzip.open(multi30k / name, "rt", encoding="utf-8").read().splitlines()[:n]


def t5_stand_in(folder, texts):
    """A small T5 directory as the hub's: its tokenizer's <pad> 0, </s> 1, <unk> 2 (and a post-processor that
    appends </s>, as T5's does), the model's vocabulary a little larger than the tokenizer's."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.Unigram())
    tokenizer.pre_tokenizer, tokenizer.decoder = pre_tokenizers.Metaspace(), decoders.Metaspace()
    tokenizer.train_from_iterator(texts, trainers.UnigramTrainer(vocab_size=400, special_tokens=["<pad>", "</s>", "<unk>"],
                                                                 unk_token="<unk>"))  # fmt: skip
    tokenizer.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    tokenizer.save(str(folder / "tokenizer.json"))
    config = transformers.T5Config(vocab_size=tokenizer.get_vocab_size() + 8, d_model=32, d_kv=16, d_ff=64, num_layers=2,
                                   num_heads=2, dropout_rate=0.0)  # fmt: skip
    torch.manual_seed(0)  # (its weights, the same whichever tests ran before in this worker)
    transformers.T5ForConditionalGeneration(config).save_pretrained(folder)
    return tokenizer


def test_fine_tune_a_transformers_t5_on_translation_pairs_translate_and_export_it(tmp_path):

    read = multi30k_lines(3000)
    pairs = list(zip(read("train.de.gz"), read("train.en.gz")))
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text("".join(f"{de}\t{en}\n" for de, en in pairs))
    hub = tmp_path / "t5"
    hub.mkdir()
    tokenizer = t5_stand_in(hub, [text for pair in pairs for text in pair])
    run_dir = tmp_path / "run"
    result = run_train("model=t5", "task=seq2seq", "data=translation", f"data.path={tsv}", "data.batch_size=32",
                       "data.max_length=40", f"init_from=hf:{hub}", "optim.lr=3e-3", "trainer.max_steps=40",
                       "trainer.val_check_interval=20", "trainer.limit_val_batches=2", "logger=csv",
                       "task.decode.max_extra_len=5", "trainer.enable_progress_bar=false",
                       f"hydra.run.dir={run_dir}")  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"init_from hf:{hub} (t5, {hub}): loaded 36 of 36 tensors" in result.stdout + result.stderr
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    val = [line["val/loss"] for line in lines if "val/loss" in line]
    assert len(val) == 2 and val[-1] < val[0]

    # The batches are T5's: the source ends in </s> (once: the post-processor's is not added), the decoder
    # starts at <pad>.
    from transformer_lab.run.build import datamodule_from_checkpoint, load_model
    from transformer_lab.store.checkpoint import checkpoint_of

    model, meta = load_model(checkpoint_of(run_dir))
    datamodule = datamodule_from_checkpoint(meta)
    datamodule.data.setup()
    src, tgt = datamodule.sequences(*[side[0] for side in datamodule.data.pairs("train")])
    assert src[-1] == 1 and src[-2] != 1 and tgt[0] == 0 and tgt[-1] == 1

    translated = run_command("translate", run_dir, "text=Ein Mann.", "max_extra_len=5")
    assert translated.returncode == 0, translated.stderr[-2000:]

    from transformer_lab.commands.export import export

    out = export(run_dir, tmp_path / "exported")
    exported = transformers.AutoModelForSeq2SeqLM.from_pretrained(out).eval()
    ids = torch.tensor([tokenizer.encode("Ein Mann fährt Fahrrad.").ids])  # with T5's </s>
    with torch.no_grad():
        got = exported(input_ids=ids, decoder_input_ids=torch.tensor([[0, 5, 6]])).logits
    torch.testing.assert_close(got, model(ids, torch.tensor([[0, 5, 6]])), atol=1e-5, rtol=1e-5)


def bert_stand_in(folder, texts):
    """A small BERT masked LM directory as the hub's, with a WordPiece tokenizer ([PAD] 0, [CLS], [SEP])."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer, tokenizer.pre_tokenizer = normalizers.BertNormalizer(), pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tokenizer.train_from_iterator(texts, trainers.WordPieceTrainer(vocab_size=500, special_tokens=specials))
    tokenizer.save(str(folder / "tokenizer.json"))
    config = transformers.BertConfig(vocab_size=tokenizer.get_vocab_size(), hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=2, intermediate_size=64, max_position_embeddings=64)  # fmt: skip
    torch.manual_seed(0)  # (its weights, the same whichever tests ran before in this worker)
    transformers.BertForMaskedLM(config).save_pretrained(folder)
    return tokenizer


def test_fine_tune_a_transformers_bert_into_a_classifier_classify_and_export_it(tmp_path):

    read = multi30k_lines(1500)
    rows = [(text, "de") for text in read("train.de.gz")] + [(text, "en") for text in read("train.en.gz")]
    tsv = tmp_path / "languages.tsv"
    tsv.write_text("".join(f"{text}\t{label}\n" for text, label in rows))
    hub = tmp_path / "bert"
    hub.mkdir()
    tokenizer = bert_stand_in(hub, [text for text, _ in rows])
    run_dir = tmp_path / "run"
    result = run_train("model=bert", "data=labelled", f"data.path={tsv}", "data.max_length=48", f"init_from=hf:{hub}",
                       "optim.lr=1e-3", "trainer.max_steps=150", "trainer.val_check_interval=75", "logger=csv",
                       "trainer.enable_progress_bar=false", f"hydra.run.dir={run_dir}")  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    log = result.stdout + result.stderr
    assert "loaded 28 of 32 tensors; left as initialised (4): head.bias, head.weight, pooler.bias, pooler.weight" in log
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["val/acc"] > 0.7, summary  # German or English (chance: 0.5): the pretrained body, a new head

    classified = run_command("classify", run_dir, "text=Ein Mann fährt Fahrrad.")
    assert classified.returncode == 0, classified.stderr[-2000:]
    assert classified.stdout.split("\t")[1] in ("de", "en")
    # lines of the labelled file itself: the text is classified, the label is not read as part of it
    lines = "Ein Mann fährt Fahrrad.\tde\nA man rides a bike.\ten\n"
    piped = run_command("classify", run_dir, input=lines)
    assert piped.returncode == 0, piped.stderr[-2000:]
    assert [line.split("\t")[0] for line in piped.stdout.splitlines()] == [
        "Ein Mann fährt Fahrrad.",
        "A man rides a bike.",
    ]
    evaluated = run_command("evaluate", run_dir)
    assert evaluated.returncode == 0 and "val/acc" in evaluated.stdout, evaluated.stderr[-2000:]
    unseen = tmp_path / "unseen.tsv"
    unseen.write_text("Un homme fait du vélo.\tfr\nA man rides a bike.\ten\n")
    refused = run_command("evaluate", run_dir, f"data.path={unseen}")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr[-2000:]
    assert refused.stderr.strip().splitlines()[-1] == (
        f"error: data.path: {unseen}: label 'fr' (1 text(s)): not one the model was trained on (its labels: de, en); "
        "leave those lines out to evaluate the rest"
    )

    from transformer_lab.commands.export import export
    from transformer_lab.run.build import load_model
    from transformer_lab.store.checkpoint import checkpoint_of

    out = export(run_dir, tmp_path / "exported")
    exported = transformers.AutoModelForSequenceClassification.from_pretrained(out).eval()
    assert exported.config.id2label == {0: "de", 1: "en"} and exported.config.label2id == {"de": 0, "en": 1}
    model, _ = load_model(checkpoint_of(run_dir))
    ids = torch.tensor([tokenizer.encode("Zwei Hunde spielen im Schnee.").ids])  # [CLS] ... [SEP], as trained
    with torch.no_grad():
        torch.testing.assert_close(exported(ids).logits, model(ids), atol=1e-5, rtol=1e-5)


def test_a_classifier_with_a_learned_tokenizer_exports_with_its_cls_and_sep(tmp_path):
    """The bert read `[CLS] text [SEP]` with its own BPE's ids: AutoTokenizer adds them too, so the exported
    model gives the same logits from raw text."""
    from transformer_lab.commands.export import export
    from transformer_lab.run.build import datamodule_from_checkpoint, load_model
    from transformer_lab.store.checkpoint import checkpoint_of

    rows = [(f"a {w} play number {i}", "pos" if w in ("good", "fine") else "neg") for i in range(60)
            for w in ("good", "fine", "bad", "poor")]  # fmt: skip
    tsv = tmp_path / "reviews.tsv"
    tsv.write_text("".join(f"{text}\t{label}\n" for text, label in rows))
    run_dir = tmp_path / "run"
    result = run_train("model=bert", "data=labelled", f"data.path={tsv}", "data.vocab_size=120",
                       f"paths.data_dir={tmp_path / 'data'}", "model.n_layer=1", "model.n_embd=32", "model.n_head=2",
                       "trainer.max_steps=5", "logger=none", "trainer.enable_progress_bar=false",
                       f"hydra.run.dir={run_dir}")  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    out = export(run_dir, tmp_path / "exported")
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    exported = transformers.AutoModelForSequenceClassification.from_pretrained(out).eval()
    model, meta = load_model(checkpoint_of(run_dir))
    text = "a good play number 7"
    ours = datamodule_from_checkpoint(meta).encode(text)  # [CLS] ... [SEP], as trained
    assert tokenizer(text)["input_ids"] == ours
    import transformer_lab

    warnings = []
    (answer,) = transformer_lab.load(run_dir).classify(["a good play " * 100], warn=warnings.append)
    assert answer and warnings == ["line 1 reaches the model's length (128 tokens): what lies beyond was cut"]
    with torch.no_grad():
        torch.testing.assert_close(exported(**tokenizer(text, return_tensors="pt")).logits,
                                   model(torch.tensor([ours])), atol=1e-5, rtol=1e-5)  # fmt: skip
