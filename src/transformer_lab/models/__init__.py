"""Plain torch.nn.Modules, one file per architecture. Nothing here imports Lightning or Hydra."""

from transformer_lab.models.bert import Bert, BertConfig
from transformer_lab.models.encdec import EncDec, EncDecConfig
from transformer_lab.models.gpt import GPT, GPTConfig
from transformer_lab.models.t5 import T5, T5Config

__all__ = ["GPT", "GPTConfig", "EncDec", "EncDecConfig", "Bert", "BertConfig", "T5", "T5Config"]
