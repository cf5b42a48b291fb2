"""What the corpus tests share: a free port for the torch.distributed store of ranks started together
(tests/unit/test_corpus.py's threads, tests/e2e/test_corpus_ranks.py's processes)."""

import socket


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
