"""Random letters in which each segment comes several times in a row ("...kfwzkfwzkfwzkfwz|qbqbqbqb|..."): after
a segment's first copy every letter is predictable, but only by looking back at what followed the same letter
the last time, at a distance the segment's length decides: what an induction head does (Olsson et al. 2022).
Generated, no file: a small attention-only GPT forms induction heads on it in under a minute on a CPU
(experiments/induction_heads.yaml)."""

from __future__ import annotations

import random
import string

from transformer_lab.data.base import DataSource
from transformer_lab.data.configs import RepeatsConfig
from transformer_lab.data.shakespeare import ShakespeareData


class RepeatsData(ShakespeareData):
    """Tiny Shakespeare's character-level stream (its splits, windows and vocabulary) of generated text."""

    config_class = RepeatsConfig
    reads_whole_file = False

    def __init__(self, **settings):  # settings: RepeatsConfig's
        DataSource.__init__(self, **settings)
        self.tokenizer, self.train_tokens, self.val_tokens, self.ready = None, None, None, False

    def read_text(self) -> str:
        c, draw, segments, length = self.config, random.Random(self.config.text_seed), [], 0
        while length < c.characters:
            segment = "".join(
                draw.choices(string.ascii_letters[: c.letters], k=draw.randint(c.min_segment, c.max_segment))
            )
            segments.append(segment * c.copies)
            length += len(segments[-1])
        return "".join(segments)[: c.characters]

    def prepare_data(self) -> None:
        """Nothing to download."""

    def data_files(self) -> dict[str, str]:
        return {}  # (generated: the config's settings are the data)
