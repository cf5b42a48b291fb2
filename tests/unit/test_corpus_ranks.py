"""Processes started together (data/corpus/ranks.py) wait for local rank 0's corpus cache on the run's
torch.distributed store, never by polling the file system. tests/e2e/test_corpus_ranks.py starts them (torchrun
and by environment) and checks that they wait."""

from helpers.runs import ROOT

SRC = ROOT / "src" / "transformer_lab" / "data" / "corpus"


def test_no_process_polls_the_file_system_for_the_cache():
    for path in SRC.glob("*.py"):
        assert "sleep(" not in path.read_text(), path
