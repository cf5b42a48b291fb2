import json
import subprocess
import sys

import pytest
import sacrebleu
import torch

from conftest import ROOT, TINY
from transformer_lab.batching.pairs import EvalBatches, LengthGroupedBatches, PairBatches
from transformer_lab.data.tokens import EOS, PAD
from transformer_lab.data.translation import TranslationDataModule, read_pairs, train_tokenizer
from transformer_lab.errors import DataUnavailableError
from transformer_lab.models.encdec import EncDec, EncDecConfig
from transformer_lab.tasks.decoding import beam_search, greedy

SENTENCES = [
    "A man rides a bicycle down the street.",
    "Two dogs play in the snow!",
    "Zwei Hunde spielen im Schnee.",
    "Ein Mann fährt Fahrrad, während es regnet.",
] * 20


def write_pairs(path, n=400):
    """A toy language pair: the target is the source's words reversed, in capitals."""
    words = "red blue green dog cat bird runs sleeps jumps over under near the a big small".split()
    g = torch.Generator().manual_seed(0)
    lines = []
    for _ in range(n):
        sentence = [
            words[i] for i in torch.randint(len(words), (int(torch.randint(3, 8, (1,), generator=g)),), generator=g)
        ]
        lines.append(" ".join(sentence) + "\t" + " ".join(w.upper() for w in reversed(sentence)))
    path.write_text("\n".join(lines) + "\n")
    return path


def bleu_matches_the_written_translations(run, pairs_file, min_test_bleu):
    """Every BLEU a run logged equals sacrebleu.corpus_bleu on the outputs and references it wrote to
    translations/, and every written (source, reference) is a pair of the data file (no misalignment)."""
    pairs = {tuple(line.split("\t")) for line in pairs_file.read_text().splitlines()}
    logged = {r["step"]: r["val/bleu"] for r in map(json.loads, (run / "metrics.jsonl").open()) if "val/bleu" in r}
    summary = json.loads((run / "summary.json").read_text())
    files = sorted((run / "translations").glob("*.jsonl"))
    assert [f.name for f in files if f.name.startswith("val-")] == [f"val-step{s:06d}.jsonl" for s in sorted(logged)]
    for f in files:
        records = [json.loads(line) for line in f.open()]
        assert {(r["source"], r["reference"]) for r in records} <= pairs
        assert [r["row"] for r in records] == sorted({r["row"] for r in records})  # each row once, in order
        score = sacrebleu.corpus_bleu([r["output"] for r in records], [[r["reference"] for r in records]]).score
        split, step = f.stem.split("-step")
        assert score == pytest.approx(
            logged[int(step)] if split == "val" else summary["test/bleu"], abs=1e-5
        )  # logged as float32
    assert summary["test/bleu"] > min_test_bleu  # a tiny model learns some of the reversal (chance: about 0)
    return scored_test_set(run)


def scored_test_set(run):
    """What a run's test BLEU scored: one record per test sentence (source, output, reference)."""
    (test_file,) = (run / "translations").glob("test-*.jsonl")
    return [json.loads(line) for line in test_file.open()]


def test_tokenizer_round_trips_text():
    tokenizer = train_tokenizer(SENTENCES, vocab_size=200)
    for sentence in set(SENTENCES):
        assert tokenizer.decode(tokenizer.encode(sentence).ids) == sentence
    assert tokenizer.token_to_id("<pad>") == PAD and tokenizer.token_to_id("<eos>") == EOS


@pytest.mark.parametrize(
    "content,message",
    [
        ("ein Hund\ta dog\nzwei Hunde two dogs\n", "pairs.tsv:2: expected 2 tab-separated fields, found 1"),
        ("ein Hund\ta dog\tein\n", "pairs.tsv:1: expected 2 tab-separated fields, found 3"),
        ("ein Hund\ta dog\n \ttwo dogs\n", "pairs.tsv:2: the source side is empty"),
        ("ein Hund\t \n", "pairs.tsv:1: the target side is empty"),
        ("\n\n", "holds no sentence pairs"),
    ],
)
def test_malformed_pair_files_name_file_and_line(tmp_path, content, message):
    path = tmp_path / "pairs.tsv"
    path.write_text(content)
    with pytest.raises(DataUnavailableError, match=message.replace("(", r"\(")):
        read_pairs(path)


def test_missing_pair_file(tmp_path):
    with pytest.raises(DataUnavailableError, match="nope.tsv: no such file"):
        read_pairs(tmp_path / "nope.tsv")


def test_pair_file_splits_and_cached_tokenizer(tmp_path):
    path = write_pairs(tmp_path / "pairs.tsv")
    data = TranslationDataModule(data_dir=str(tmp_path / "data"), path=str(path), vocab_size=120)
    dm = PairBatches(data, batch_size=16)
    dm.setup()
    assert (len(data.text["train"]), len(data.text["val"]), len(data.text["test"])) == (360, 20, 20)
    assert not {p for p in data.text["train"]} & {p for p in data.text["test"]} - {p for p in data.text["train"]}
    cached = list((tmp_path / "data" / "tokenizers").glob("bpe-120-*.json"))
    assert len(cached) == 1
    again = TranslationDataModule(data_dir=str(tmp_path / "data"), path=str(path), vocab_size=120)
    again.setup()  # reuses the cache: the same vocabulary
    assert again.tokenizer.get_vocab() == data.tokenizer.get_vocab()
    src, tgt = next(iter(dm.train_dataloader()))
    assert (src[:, 0] != PAD).all() and (tgt[:, 0] == 1).all()  # <bos> first
    assert dm.decode(tgt[0].tolist()) in {t for _, t in data.text["train"]}


def test_corrupt_tokenizer_cache_is_reported_and_rebuilt(tmp_path, caplog):
    path = write_pairs(tmp_path / "pairs.tsv")
    TranslationDataModule(data_dir=str(tmp_path / "data"), path=str(path), vocab_size=120).setup()
    cache = next((tmp_path / "data" / "tokenizers").glob("*.json"))
    cache.write_text(cache.read_text()[:100])
    dm = TranslationDataModule(data_dir=str(tmp_path / "data"), path=str(path), vocab_size=120)
    dm.setup()
    assert "unreadable" in caplog.text and json.loads(cache.read_text())  # rebuilt whole


def test_length_grouping_keeps_padding_small_and_resumes():
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(3, 40, (2000,), generator=g).tolist()
    src = [torch.ones(n, dtype=torch.long) for n in lengths]
    tgt = [torch.ones(n + 1, dtype=torch.long) for n in lengths]
    grouped = LengthGroupedBatches(src, tgt, 32, seed=1)
    random_order = LengthGroupedBatches(src, tgt, 32, seed=1, pool=1)  # pools of one batch: no grouping
    assert grouped.padding_fraction() < 0.05 < random_order.padding_fraction()
    everything = [b[0] for b in grouped]
    resumed = LengthGroupedBatches(src, tgt, 32, seed=1, position=lambda: (0, 5))
    assert all(torch.equal(a, b[0]) for a, b in zip(everything[5:], resumed, strict=True))
    rows = torch.cat([r for _, _, r in EvalBatches(src, tgt, 64)])
    assert sorted(rows.tolist()) == list(range(2000))


def tiny_model():
    torch.manual_seed(0)
    return EncDec(EncDecConfig(vocab_size=40, block_size=64, n_layer=2, n_head=2, n_embd=32, dropout=0.0)).eval()


def test_beam_one_equals_greedy():
    model = tiny_model()
    src = torch.randint(5, 40, (6, 9))
    src[2, 5:] = PAD
    assert beam_search(model, src, 1, 20, bos=1, eos=2) == greedy(model, src, 20, bos=1, eos=2)


@pytest.mark.e2e
def test_translation_pairs_train_end_to_end(tmp_path, train_process):
    pairs = write_pairs(tmp_path / "pairs.tsv", n=600)
    run = tmp_path / "run"
    result = train_process.run(
        "model=encdec",
        "data=translation",
        f"data.path={pairs}",
        "data.vocab_size=120",
        "data.batch_size=32",
        f"paths.data_dir={tmp_path / 'data'}",
        *TINY,
        "model.n_embd=64",
        "model.n_head=4",
        "trainer.max_steps=150",
        "trainer.val_check_interval=50",
        "optim.lr=3e-3",
        "optim.warmup_steps=20",
        "task.decode.beam_size=2",
        "logger=csv",
        "trainer.log_every_n_steps=5",
        f"hydra.run.dir={run}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["val/loss_best"] < 3.0  # from ln(120) = 4.8
    assert "test translations at step 150" in result.stdout + result.stderr
    test_set = bleu_matches_the_written_translations(run, pairs, min_test_bleu=5)  # measured 9.9

    # The translate command gives the outputs the run scored: the best checkpoint, beam 2, the test sources.
    out = subprocess.run(
        [sys.executable, "-m", "transformer_lab.translate", str(run), "beam_size=2"],
        input="\n".join(r["source"] for r in test_set) + "\n",
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [r["output"] for r in test_set]

    # Evaluated again without training: the same test BLEU with the same beam, another with greedy decoding
    from transformer_lab.evaluate import evaluate  # in this process: the command line is tested in test_train

    beam2, greedy = (
        evaluate(str(run), "test", [f"task.decode.beam_size={beam}"], str(tmp_path / f"{beam}.json"))["metrics"]
        for beam in (2, 1)
    )
    assert beam2["test/bleu"] == pytest.approx(summary["test/bleu"], abs=1e-6) and "test/bleu" in greedy


@pytest.mark.e2e
def test_gpt_translates_as_a_prefix_lm(tmp_path, train_process):
    pairs = write_pairs(tmp_path / "pairs.tsv", n=600)
    run = tmp_path / "run"
    result = train_process.run(
        "model=gpt",
        "data=translation",
        f"data.path={pairs}",
        "data.vocab_size=120",
        "data.max_length=16",
        "data.batch_size=32",
        f"paths.data_dir={tmp_path / 'data'}",
        *TINY,
        "model.n_embd=64",
        "model.n_head=4",
        "trainer.max_steps=150",
        "trainer.val_check_interval=50",
        "optim.lr=3e-3",
        "optim.warmup_steps=20",
        "logger=csv",
        "trainer.log_every_n_steps=5",
        f"hydra.run.dir={run}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["val/loss_best"] < 3.0  # from ln(120) = 4.8, on target tokens only
    assert "test translations at step 150" in result.stdout + result.stderr
    bleu_matches_the_written_translations(run, pairs, min_test_bleu=1)  # measured 3.0


def test_prefix_lm_sequences_predict_only_the_target():
    from transformer_lab.batching.pairs import prefix_lm
    from transformer_lab.data.tokens import BOS, SEP

    x, y = prefix_lm(torch.tensor([10, 11, EOS]), torch.tensor([BOS, 20, 21, EOS]))
    assert x.tolist() == [BOS, 10, 11, SEP, 20, 21] and y.tolist() == [-100, -100, -100, 20, 21, EOS]


@pytest.mark.e2e
def test_separate_vocabularies(tmp_path, train_process):
    pairs = write_pairs(tmp_path / "pairs.tsv", n=300)
    dm = TranslationDataModule(data_dir=str(tmp_path / "data"), path=str(pairs), vocab_size=100, shared_vocab=False)
    dm.setup()
    assert dm.source_tokenizer is not dm.tokenizer and dm.source_vocab_size is not None

    def has_capitals(tokenizer):
        return any(piece.strip("▁").isupper() for piece in tokenizer.get_vocab())

    assert has_capitals(dm.tokenizer) and not has_capitals(dm.source_tokenizer)  # targets are in capitals
    run = tmp_path / "run"
    result = train_process.run(
        "model=encdec",
        "data=translation",
        f"data.path={pairs}",
        "data.vocab_size=100",
        "data.shared_vocab=false",
        f"paths.data_dir={tmp_path / 'data'}",
        *TINY,
        "trainer.max_steps=20",
        "trainer.val_check_interval=10",
        "logger=none",
        f"hydra.run.dir={run}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    # The translate command reads sources with the source vocabulary: its outputs (beam 4, as decode.beam_size)
    # are those the run scored on the test set with the best checkpoint.
    test_set = scored_test_set(run)
    out = subprocess.run(
        [sys.executable, "-m", "transformer_lab.translate", str(run), "beam_size=4"],
        input="\n".join(r["source"] for r in test_set) + "\n",
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [r["output"] for r in test_set]
