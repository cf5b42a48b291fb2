"""Text corpora (data=text, data/corpus/): sources, documents and their split, the tokenizers, the cache on
disk and what every objective reads from it. Each objective training on one cache through train.py is
tests/e2e/test_corpus.py."""

import json
import re
import threading

import numpy as np
import pytest
import torch

from helpers.corpus import free_port
from transformer_lab.data.corpus import TextCorpus, TokenFile, prepare
from transformer_lab.data.tokenizers import pretrained
from transformer_lab.errors import ConfigError, DataUnavailableError

DOCS = [
    f"Document {i}: " + " ".join(["the cat sat on the mat", "señor €5 naïve"][i % 2] for _ in range(i % 7 + 1))
    for i in range(200)
]


def corpus(tmp_path, docs=DOCS, **settings):
    tmp_path.mkdir(parents=True, exist_ok=True)
    if "path" not in settings:
        (tmp_path / "docs.txt").write_text("\n\n".join(docs), encoding="utf-8")
        settings["path"] = str(tmp_path / "docs.txt")
    settings = {"cache_dir": str(tmp_path / "cache"), "block_size": 8, "val_fraction": 0.2, **settings}
    data = TextCorpus(**settings)
    data.setup()
    return data


def documents(data, tokens) -> list[str]:
    """The documents of a stream of ids: the text between end-of-text tokens."""
    ids = tokens[torch.arange(len(tokens))].tolist()
    out, current = [], []
    for i in ids:
        if i == data.tokenizer.eot_id:
            out.append(data.decode(current))
            current = []
        else:
            current.append(i)
    assert not current  # every document ends with end-of-text
    return out


@pytest.mark.parametrize("tokenizer", ["char", "bytes", "bpe"])
def test_each_document_is_whole_in_one_split_and_the_split_is_seeded(tmp_path, tokenizer):
    data = corpus(tmp_path, tokenizer=tokenizer, vocab_size=300)
    train, val = documents(data, data.train), documents(data, data.val)
    assert sorted(train + val) == sorted(DOCS)  # every document once, whole, decoded exactly
    assert 0.1 < len(val) / len(DOCS) < 0.3  # val_fraction=0.2
    again = corpus(tmp_path / "again", tokenizer=tokenizer, vocab_size=300)
    assert documents(again, again.val) == val
    other = corpus(tmp_path / "other", tokenizer=tokenizer, vocab_size=300, split_seed=1)
    assert documents(other, other.val) != val


def test_the_cache_is_checked_against_its_records_and_names_its_files_relative_to_itself(tmp_path, caplog):
    import os
    import shutil

    first = corpus(tmp_path, tokenizer="char")
    whole = first.train[torch.arange(len(first.train))]
    shard, records = first.shards[0], list((tmp_path / "cache" / "shards").glob("*.json"))
    assert [json.loads(r.read_text())["train"] for r in records] == [os.path.basename(shard.train)]  # a name alone
    with open(shard.train, "r+b") as f:  # a token file cut short (a full disk, a copy interrupted)
        f.truncate(os.path.getsize(shard.train) // 2)
    again = corpus(tmp_path, tokenizer="char")
    assert "are incomplete (" in caplog.text and "bytes, its record says" in caplog.text
    assert torch.equal(again.train[torch.arange(len(again.train))], whole)  # encoded again, all of it
    os.unlink(again.shards[0].val)  # a token file gone: encoded again too
    assert len(corpus(tmp_path, tokenizer="char").val) == len(first.val)
    (learned,) = (tmp_path / "cache" / "tokenizers").glob("char-*.json")
    learned.write_text('{"kind": "char", "chars": ')  # a cached tokenizer cut short: learned again
    assert corpus(tmp_path, tokenizer="char").tokenizer.chars == first.tokenizer.chars
    assert "the cached tokenizer" in caplog.text and "learning it again" in caplog.text

    moved = tmp_path / "moved"  # the cache moved elsewhere: it reads its own files, the original's are gone
    shutil.move(tmp_path / "cache", moved / "cache")
    (moved / "docs.txt").write_text((tmp_path / "docs.txt").read_text())
    caplog.clear()
    read = corpus(moved, path=str(tmp_path / "docs.txt"), tokenizer="char")
    assert "encoding it again" not in caplog.text and read.shards[0].train.startswith(str(moved / "cache"))
    assert torch.equal(read.train[torch.arange(len(read.train))], whole)
    record = next((moved / "cache" / "shards").glob("*.json"))  # a record as written before: absolute paths
    saved = json.loads(record.read_text())
    record.write_text(
        json.dumps({**saved, "train": f"/elsewhere/{saved['train']}", "val": f"/elsewhere/{saved['val']}"})
    )
    assert corpus(moved, path=str(tmp_path / "docs.txt"), tokenizer="char").shards[0].train.startswith(str(moved))


def test_a_cache_that_cannot_be_written_is_one_line_naming_it(tmp_path):
    import os

    (tmp_path / "cache").mkdir()
    (tmp_path / "cache").chmod(0o555)
    if os.access(tmp_path / "cache", os.W_OK):  # (root writes anywhere): the same refusal for a full disk
        import errno
        from unittest import mock

        full = OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "cache" / "shards"))
        with mock.patch("transformer_lab.data.corpus.preparation.encode_source", side_effect=full):
            with pytest.raises(DataUnavailableError) as error:
                corpus(tmp_path, tokenizer="bytes")
        assert str(error.value).startswith("data.cache_dir: cannot write the corpus cache (No space left on device: ")
        assert "free space there or another data.cache_dir" in str(error.value)
        return
    with pytest.raises(DataUnavailableError, match=r"^data.cache_dir: cannot write the corpus cache \(Permission"):
        corpus(tmp_path, tokenizer="bytes")


def test_a_cache_under_a_file_or_with_a_mistyped_record_is_one_line_or_made_again(tmp_path, caplog):
    (tmp_path / "a-file").write_text("not a folder\n")
    with pytest.raises(DataUnavailableError, match=r"^data.cache_dir: cannot write the corpus cache \(Not a directory"):
        corpus(tmp_path, tokenizer="bytes", cache_dir=str(tmp_path / "a-file" / "cache"))
    first = corpus(tmp_path, tokenizer="char")
    (record,) = (tmp_path / "cache" / "shards").glob("*.json")
    record.write_text(json.dumps({**json.loads(record.read_text()), "train_tokens": "x"}))
    again = corpus(tmp_path, tokenizer="char")
    assert "is not one" in caplog.text and len(again.train) == len(first.train)


def test_txt_jsonl_parquet_and_a_huggingface_dataset_read_the_same_documents(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    (tmp_path / "docs.jsonl").write_text("".join(json.dumps({"text": d, "id": i}) + "\n" for i, d in enumerate(DOCS)))
    pq.write_table(pa.table({"text": DOCS}), tmp_path / "docs.parquet")
    txt = corpus(tmp_path, tokenizer="bytes")
    expected = (txt.train[torch.arange(len(txt.train))], txt.val[torch.arange(len(txt.val))])
    for name, settings in [
        ("jsonl", {"path": str(tmp_path / "docs.jsonl")}),
        ("parquet", {"path": str(tmp_path / "docs.parquet")}),
        # the call that reads a hub dataset by name, on a local file (this machine reaches no hub)
        ("dataset", {"dataset": "json", "path": str(tmp_path / "docs.jsonl")}),
    ]:
        data = corpus(tmp_path / name, tokenizer="bytes", **settings)
        got = documents(data, data.train) + documents(data, data.val)
        assert sorted(got) == sorted(DOCS), name
        if name != "dataset":  # a file is split by its own hash: the same text in another format splits otherwise
            assert len(data.train) + len(data.val) == len(expected[0]) + len(expected[1])


def test_a_directory_a_glob_and_a_list_find_the_same_files(tmp_path):
    from transformer_lab.data.corpus import find_files

    (tmp_path / "a" / "deep").mkdir(parents=True)
    for name in ("a/one.txt", "a/deep/two.jsonl", "a/three.parquet", "a/notes.md"):
        (tmp_path / name).write_text("x")
    expected = [tmp_path / "a/deep/two.jsonl", tmp_path / "a/one.txt", tmp_path / "a/three.parquet"]
    assert find_files(str(tmp_path / "a")) == expected
    assert find_files(str(tmp_path / "a/**/*")) == expected
    assert (
        find_files([str(tmp_path / "a/deep/two.jsonl"), str(tmp_path / "a/one.txt"), str(tmp_path / "a/three.parquet")])
        == expected
    )
    for spec, message in [
        (tmp_path / "a/deep/../../none", "no such file or directory"),
        (tmp_path / "a/notes.md", "is not a .txt, .jsonl, .parquet file"),
        (tmp_path / "a/*.csv", "no .txt, .jsonl, .parquet files match"),
    ]:
        with pytest.raises(DataUnavailableError, match="^" + re.escape(f"data.path: {spec}: {message}")):
            find_files(str(spec))
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataUnavailableError, match="a directory with no .txt, .jsonl, .parquet files"):
        find_files(str(tmp_path / "empty"))


def test_bpe_learns_its_vocabulary_from_the_training_documents_and_counts_bytes_exactly(tmp_path):
    data = corpus(tmp_path, tokenizer="bpe", vocab_size=300)
    assert data.vocab_size == 300 and data.tokenizer.eot_id == 0
    text = "señor €5, the naïve cat 🐈"
    ids = data.encode(text)
    assert data.decode(ids) == text
    # bits per byte divide by the text's UTF-8 bytes: the pieces' bytes add up to them, even where a piece
    # is part of a character
    token_bytes = data.token_bytes()
    assert sum(token_bytes[i] for i in ids) == len(text.encode("utf-8"))
    assert token_bytes[data.tokenizer.eot_id] == 0


def test_a_pretrained_tokenizer_json_reads_as_it_was_saved(tmp_path):
    learned = corpus(tmp_path, tokenizer="bpe", vocab_size=300)
    (tmp_path / "tokenizer.json").write_text(learned.tokenizer.tokenizer.to_str())
    data = corpus(tmp_path / "pre", tokenizer=str(tmp_path / "tokenizer.json"))
    assert data.vocab_size == 300 and data.tokenizer.eot_id == learned.tokenizer.eot_id
    assert torch.equal(data.val[torch.arange(len(data.val))], learned.val[torch.arange(len(learned.val))])
    # a tokenizer without an end-of-text token gets one added
    from tokenizers import Tokenizer, models

    Tokenizer(models.WordLevel({"a": 0, "<unk>": 1}, unk_token="<unk>")).save(str(tmp_path / "words.json"))
    words = pretrained(str(tmp_path / "words.json"), "<|endoftext|>")
    assert words.vocab_size == 3 and words.eot_id == 2


def test_the_cache_encodes_a_changed_file_again_and_an_unchanged_one_never(tmp_path, monkeypatch):
    import transformer_lab.data.corpus.preparation as module

    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "a.txt").write_text("\n\n".join(DOCS[:100]))
    (folder / "b.txt").write_text("\n\n".join(DOCS[100:]))
    encoded = []
    original = module.encode_source
    monkeypatch.setattr(
        module, "encode_source", lambda c, source, *a: encoded.append(source.label) or original(c, source, *a)
    )
    first = corpus(tmp_path, path=str(folder), tokenizer="bytes")
    assert encoded == [str(folder / "a.txt"), str(folder / "b.txt")]
    again = corpus(tmp_path, path=str(folder), tokenizer="bytes")
    assert encoded == [str(folder / "a.txt"), str(folder / "b.txt")]  # nothing encoded again
    assert torch.equal(again.train[torch.arange(len(again.train))], first.train[torch.arange(len(first.train))])
    (folder / "b.txt").write_text("\n\n".join(DOCS[100:150]))
    changed = corpus(tmp_path, path=str(folder), tokenizer="bytes")
    assert encoded[2:] == [str(folder / "b.txt")]
    assert sorted(documents(changed, changed.train) + documents(changed, changed.val)) == sorted(DOCS[:150])
    # the files are uint16 ids where the vocabulary fits, uint32 where asked
    shard = changed.shards[0]
    assert (tmp_path / "cache" / "shards").is_dir() and shard.train.endswith(".train.bin")
    assert len(open(shard.train, "rb").read()) == 2 * shard.train_tokens
    wide = corpus(tmp_path, path=str(folder), tokenizer="bytes", token_dtype="uint32")
    assert len(open(wide.shards[0].train, "rb").read()) == 4 * wide.shards[0].train_tokens
    assert torch.equal(wide.val[torch.arange(len(wide.val))], changed.val[torch.arange(len(changed.val))])
    # beside the token files, the tokenizer that wrote them
    from transformer_lab.data.tokenizers import from_json

    (saved,) = (tmp_path / "cache" / "tokenizers").glob("encoded-with-*.json")
    assert from_json(saved.read_text()).decode(wide.val[torch.arange(20)]) == wide.decode(wide.val[torch.arange(20)])


def test_a_file_that_fails_midway_leaves_no_cache_behind(tmp_path):
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "a.txt").write_text("\n\n".join(DOCS))
    (folder / "b.txt").write_bytes(("ok\n\n" * 300_000).encode() + "caf\u00e9\n".encode("latin-1"))
    with pytest.raises(
        DataUnavailableError,
        match="^" + re.escape(f"data.path: {folder / 'b.txt'}: is not UTF-8 text (byte 0xe9 at offset 1200003)"),
    ):
        corpus(tmp_path, path=str(folder), tokenizer="bytes")
    left = sorted(p.name for p in (tmp_path / "cache" / "shards").iterdir())
    assert len(left) == 3 and all(not n.startswith(".") for n in left)  # a.txt's shard, complete; nothing of b.txt


def test_uint16_forced_on_a_vocabulary_that_does_not_fit_is_refused_before_encoding(tmp_path):
    from tokenizers import Tokenizer, models

    vocab = {f"w{i}": i for i in range(70_000)} | {"<unk>": 70_000}
    Tokenizer(models.WordLevel(vocab, unk_token="<unk>")).save(str(tmp_path / "big.json"))
    with pytest.raises(
        ConfigError, match="^data.token_dtype: uint16 holds ids below 65,536 but the tokenizer has 70,002"
    ):
        corpus(tmp_path, tokenizer=str(tmp_path / "big.json"), token_dtype="uint16")
    assert not (tmp_path / "cache" / "shards").exists()
    data = corpus(tmp_path, tokenizer=str(tmp_path / "big.json"))  # auto: uint32
    assert data.train.parts[0].dtype == np.uint32


def test_a_token_file_of_many_parts_reads_as_their_concatenation(tmp_path):
    parts = [np.arange(n, dtype=np.uint16) + 100 * k for k, n in enumerate([5, 0, 7, 3])]
    for k, p in enumerate(parts):
        p.tofile(tmp_path / f"{k}.bin")
    tokens = TokenFile([str(tmp_path / f"{k}.bin") for k in range(4)], np.dtype(np.uint16))
    whole = torch.from_numpy(np.concatenate(parts).astype(np.int64))
    index = torch.tensor([[0, 4, 5, 6], [10, 11, 12, 14]])  # windows across the parts' ends
    assert len(tokens) == 15 and torch.equal(tokens[index], whole[index]) and tokens[index].dtype == torch.long


def test_local_ranks_above_zero_wait_for_rank_zeros_cache_and_its_failure(tmp_path):
    """Two ranks in threads of this process (tests/e2e/test_corpus_ranks.py starts them as processes): rank 1
    waits on the store rank 0 hosts, writes nothing, and reads what rank 0 wrote; or fails at once where rank 0
    did, or where its data.cache_dir lacks what rank 0 wrote."""
    from transformer_lab.data.configs import TextConfig
    from transformer_lab.data.corpus.ranks import Ranks

    (tmp_path / "docs.txt").write_text("\n\n".join(DOCS))
    config = TextConfig(path=str(tmp_path / "docs.txt"), tokenizer="char", cache_dir=str(tmp_path / "cache"))
    port = free_port()
    rank0, rank1 = (Ranks(r, r, "0", 2, "127.0.0.1", port) for r in (0, 1))
    got = {}
    waiter = threading.Thread(target=lambda: got.update(shards=prepare(config, ranks=rank1)[1]))
    waiter.start()
    waiter.join(1.0)
    assert waiter.is_alive() and not (tmp_path / "cache").exists()  # it waits, writing nothing
    _, shards = prepare(config, ranks=rank0)
    waiter.join(10)
    assert got["shards"] == shards

    def rank_one(config):  # rank 1's error, once rank 0 prepared `config` or failed
        failed = {}

        def wait():
            try:
                prepare(config, ranks=rank1)
            except DataUnavailableError as e:
                failed["error"] = str(e)

        waiter = threading.Thread(target=wait)
        waiter.start()
        return waiter, failed

    (tmp_path / "bad.txt").write_bytes(b"caf\xe9\n")
    bad = TextConfig(path=str(tmp_path / "bad.txt"), tokenizer="char", cache_dir=str(tmp_path / "cache"))
    waiter, failed = rank_one(bad)
    with pytest.raises(DataUnavailableError, match="is not UTF-8 text"):
        prepare(bad, ranks=rank0)
    waiter.join(10)
    assert failed["error"] == (
        f"data: local rank 0 could not prepare the corpus cache: data.path: {tmp_path / 'bad.txt'}: is not UTF-8 "
        "text (byte 0xe9 at offset 3)"
    )
    # a rank whose data.cache_dir is not rank 0's finds nothing there, and says so rather than write it
    waiter, failed = rank_one(TextConfig(**{**config.__dict__, "cache_dir": str(tmp_path / "elsewhere")}))
    prepare(config, ranks=rank0)
    waiter.join(10)
    assert failed["error"] == (
        f"data.cache_dir: {tmp_path / 'elsewhere'}: local rank 0 prepared the corpus cache, but the char tokenizer "
        "is not there (is data.cache_dir one folder for the processes of a node?)"
    )
    assert not (tmp_path / "elsewhere" / "tokenizers").exists()


def test_bits_per_byte_leave_out_tokens_of_no_text(tmp_path):
    import math
    from types import SimpleNamespace

    import torch.nn.functional as F

    from transformer_lab.batching.windows import TextWindows
    from transformer_lab.tasks.metrics import BitsPerByte

    data = corpus(tmp_path, tokenizer="bytes")
    metric = BitsPerByte({}, TextWindows(data, batch_size=2), None)
    logged = {}
    task = SimpleNamespace(log=lambda name, value: logged.update({name: float(value)}))
    logits = torch.randn(1, 4, 257, generator=torch.Generator().manual_seed(0))
    targets = torch.tensor([[97, 256, 98, 195]])  # a, end-of-text, b, a UTF-8 lead byte
    metric.step(task, (None, targets), logits)
    metric.end(task, "val")
    text = torch.tensor([True, False, True, True])
    nats = F.cross_entropy(logits[0, text], targets[0, text], reduction="sum").item()
    assert logged["val/bpb"] == pytest.approx(nats / math.log(2) / 3)


def test_a_file_without_separators_is_cut_into_documents_not_held_whole(tmp_path, monkeypatch):
    import random

    import transformer_lab.data.corpus.readers as module

    monkeypatch.setattr(module, "MAX_DOCUMENT", 50)
    words = " ".join(random.Random(0).choice(["ab", "cde", "f\n"]) for _ in range(500))
    (tmp_path / "long.txt").write_text(words + "\n\nshort one\n\n" + "x" * 120)
    docs = [d for batch, _ in module._text_batches(tmp_path / "long.txt", "\n\n") for d in batch]
    assert max(len(d) for d in docs) <= 50 and "".join(docs) == words + "short one" + "x" * 120
    assert "short one" in docs and all(d[-1] in " \n" for d in docs[: docs.index("short one")][:-1])


def test_span_and_masking_batches_give_each_id_its_texts_bytes_for_bits_per_byte(tmp_path):
    """val/bpb for t5 and bert too: a data id keeps its bytes where the batches move it up (a vocabulary
    without padding), the ids they add (padding, end, sentinels, [MASK], [CLS]) have none."""
    from transformer_lab.batching.masked_lm import MaskedLM
    from transformer_lab.batching.span_corruption import SpanCorruption
    from transformer_lab.data.shakespeare import ShakespeareData

    corpus_data = corpus(tmp_path, tokenizer="bytes")  # end-of-text 256; padding added as 257
    chars = tmp_path / "chars.txt"
    chars.write_text("aé€" * 200)
    char_data = ShakespeareData(path=str(chars), block_size=8)  # no specials: ids move up by two
    for data, offset in ((corpus_data, 0), (char_data, 2)):
        for batches in (SpanCorruption(data, 2, input_length=16, extra_ids=10), MaskedLM(data, 2, length=16)):
            batches.setup()
            got, own = batches.token_bytes(), data.token_bytes()
            assert len(got) == batches.vocab_size
            assert got[offset : offset + len(own)] == own
            assert sum(got) == sum(own)  # nothing for what the batches add
            text = "aé€" if offset else "señor"
            ids = [i + offset for i in data.encode(text)]
            assert sum(got[i] for i in ids) == len(text.encode("utf-8"))


def test_a_corpus_saved_with_windows_line_ends_reads_as_the_same_documents(tmp_path):
    (tmp_path / "crlf.txt").write_bytes("\n\n".join(DOCS).replace("\n", "\r\n").encode())
    data = corpus(tmp_path, path=str(tmp_path / "crlf.txt"), tokenizer="char")
    assert sorted(documents(data, data.train) + documents(data, data.val)) == sorted(DOCS)
    assert "\r" not in data.tokenizer.chars
