"""The cache's token files, read through memory maps: memory does not grow with the corpus."""

from __future__ import annotations

import mmap
import os

import numpy as np
import torch


class TokenFile:
    """Token ids in one or more files (uint16 or uint32), read through read-only memory maps (`mmap.mmap`, an
    array over each with np.frombuffer): indexing with an index tensor gives those ids as int64 and reads only
    the pages they are on."""

    def __init__(self, paths: list[str], dtype: np.dtype):
        self.paths, self.dtype = list(paths), np.dtype(dtype)
        self.maps: list[mmap.mmap] = []
        for path in self.paths:
            if os.path.getsize(path):  # (an empty file cannot be mapped, and holds nothing)
                with open(path, "rb") as f:  # (the map keeps its own descriptor)
                    self.maps.append(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
        for m in self.maps:
            m.madvise(mmap.MADV_RANDOM)  # no read-ahead around a random window
        self.parts = [np.frombuffer(m, dtype=self.dtype) for m in self.maps]  # read-only views
        self.bounds = np.cumsum([0] + [len(p) for p in self.parts])

    def __len__(self) -> int:
        return int(self.bounds[-1])

    def __getitem__(self, index) -> torch.Tensor:
        if isinstance(index, slice):
            index = torch.arange(len(self))[index]
        index = np.asarray(index)
        if len(self.parts) == 1:
            out = self.parts[0][index]
        else:
            part = np.searchsorted(self.bounds, index, side="right") - 1
            out = np.empty(index.shape, self.dtype)
            for k in np.unique(part):
                here = part == k
                out[here] = self.parts[k][index[here] - self.bounds[k]]
        for m in self.maps:  # unmap what was read: else each window's pages (and the kernel maps ~64 KB
            m.madvise(mmap.MADV_DONTNEED)  # around each) stay in this process's RSS, which then grows
        return torch.from_numpy(np.asarray(out).astype(np.int64))  # with the corpus (nanoGPT's memmap "leak")

    def __getstate__(self) -> dict:  # (a map does not pickle: the files are opened again)
        return {"paths": self.paths, "dtype": self.dtype}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["paths"], state["dtype"])
