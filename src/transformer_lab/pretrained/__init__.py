"""Transformers checkpoints in and out: `init_from=hf:NAME_OR_DIR` and `python -m transformer_lab export`.

A checkpoint's config.json names its `model_type`; each family here (GPT-2, Llama / Mistral / Qwen2, BERT,
T5, Marian) says which of our models computes what it computes, with which settings, and how its tensors
are named and laid out: a table of (our tensor, their tensors, how), read one way to load and the other to
export. Loading reads the files themselves (config.json, safetensors or pytorch_model.bin, tokenizer.json);
a hub name is fetched with huggingface_hub. `transformers` itself is not needed for either direction.

hub.py reads the files; tables.py holds what the tables share; gpt2.py, llama.py (Llama, Mistral, Qwen2),
bert.py, t5.py and marian.py one family each; load.py applies a checkpoint to a run and loads its tensors.
Import from those modules: this one imports none of them.
"""
