"""Any text corpus (`data=text`): local files (`.txt`, `.jsonl`, `.parquet`; a file, a directory, a glob or a
list of them) or a Hugging Face dataset by name, tokenized once into a cache on disk and read through memory
maps, so memory does not grow with the corpus.

- readers.py: the sources and their documents: a `.txt` file's pieces between `data.separator`s (blank lines
  by default), a `.jsonl` line's or a parquet/dataset row's `data.text_field`.
- encoding.py: the tokenizer, learned once and kept in the cache; the split by document (each goes to
  validation with probability `data.val_fraction`, drawn from a generator seeded with (`data.split_seed`, its
  file's hash), so a file's split never depends on the other files); each source's training and validation
  ids as `uint16` where the vocabulary fits, else `uint32` (nanoGPT's `train.bin`), each document followed by
  the end-of-text token, so a window that spans two documents sees where one ends.
- cache.py: the cache (`data.cache_dir`): files' hashes, keys, and each source's shard record. A source (a
  dataset counts as one) is filed under a key over its file's SHA-256, the tokenizer and the split settings:
  a changed file is encoded again, an unchanged one never is. Each file of it is written under a temporary
  name and renamed into place, and a shard's record is written last, so an interrupted preparation leaves
  nothing a later run would trust.
- preparation.py: prepare(), the cache completed where it lacks anything.
- ranks.py: of processes started together (torchrun, srun), local rank 0 prepares; the others wait for it on
  a torch.distributed store, then read the cache.
- token_file.py: the token files, read through read-only memory maps.
- text_corpus.py: TextCorpus, the class `data=text` builds (its `_target_`, and a checkpoint's
  config: transformer_lab.data.corpus.TextCorpus).
"""

from transformer_lab.data.corpus.cache import FileHashes, Shard
from transformer_lab.data.corpus.preparation import prepare
from transformer_lab.data.corpus.readers import Source, find_files, sources
from transformer_lab.data.corpus.text_corpus import TextCorpus
from transformer_lab.data.corpus.token_file import TokenFile

__all__ = ["FileHashes", "Shard", "Source", "TextCorpus", "TokenFile", "find_files", "prepare", "sources"]
