"""Exact resume after a crash, graceful interrupts, and the non-finite loss guard, on real train.py runs.

Here: whole files; tests/e2e/test_resume.py has the rest."""

import pytest


def test_only_whole_files_appear(tmp_path):
    from transformer_lab.store.atomic import atomic_write

    target = tmp_path / "out.bin"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError):
        with atomic_write(target) as f:
            f.write(b"half of the new")
            raise RuntimeError("crash mid-write")
    assert target.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["out.bin"]
