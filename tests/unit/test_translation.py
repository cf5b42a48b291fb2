import json

import pytest
import torch

from helpers.translation import write_pairs
from transformer_lab.batching.pairs import EvalBatches, LengthGroupedBatches, PairBatches
from transformer_lab.data.tokens import EOS, PAD
from transformer_lab.data.translation import TranslationData, read_pairs, train_tokenizer
from transformer_lab.errors import DataUnavailableError
from transformer_lab.models.encdec import EncDec, EncDecConfig
from transformer_lab.tasks.decoding import beam_search, greedy

SENTENCES = [
    "A man rides a bicycle down the street.",
    "Two dogs play in the snow!",
    "Zwei Hunde spielen im Schnee.",
    "Ein Mann fährt Fahrrad, während es regnet.",
] * 20


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
    data = TranslationData(data_dir=str(tmp_path / "data"), path=str(path), vocab_size=120)
    dm = PairBatches(data, batch_size=16)
    dm.setup()
    assert (len(data.text["train"]), len(data.text["val"]), len(data.text["test"])) == (360, 20, 20)
    assert not {p for p in data.text["train"]} & {p for p in data.text["test"]} - {p for p in data.text["train"]}
    cached = list((tmp_path / "data" / "tokenizers").glob("bpe-120-*.json"))
    assert len(cached) == 1
    again = TranslationData(data_dir=str(tmp_path / "data"), path=str(path), vocab_size=120)
    again.setup()  # reuses the cache: the same vocabulary
    assert again.tokenizer.get_vocab() == data.tokenizer.get_vocab()
    src, tgt = next(iter(dm.train_dataloader()))
    assert (src[:, 0] != PAD).all() and (tgt[:, 0] == 1).all()  # <bos> first
    assert dm.decode(tgt[0].tolist()) in {t for _, t in data.text["train"]}


def test_corrupt_tokenizer_cache_is_reported_and_rebuilt(tmp_path, caplog):
    path = write_pairs(tmp_path / "pairs.tsv")
    TranslationData(data_dir=str(tmp_path / "data"), path=str(path), vocab_size=120).setup()
    cache = next((tmp_path / "data" / "tokenizers").glob("*.json"))
    cache.write_text(cache.read_text()[:100])
    dm = TranslationData(data_dir=str(tmp_path / "data"), path=str(path), vocab_size=120)
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


def test_prefix_lm_sequences_predict_only_the_target():
    from transformer_lab.batching.pairs import prefix_lm
    from transformer_lab.data.tokens import BOS, SEP

    x, y = prefix_lm(torch.tensor([10, 11, EOS]), torch.tensor([BOS, 20, 21, EOS]))
    assert x.tolist() == [BOS, 10, 11, SEP, 20, 21] and y.tolist() == [-100, -100, -100, 20, 21, EOS]
