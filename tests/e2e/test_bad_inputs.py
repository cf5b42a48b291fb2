"""A user's mistakes, each run through train.py as a user would: exit non-zero with one clear message that
names the problem, no traceback, and nothing that existed before lost or overwritten."""

import gzip
import hashlib
import json

import pytest
import torch

from helpers.runs import ROOT, TINY, run_train

MODULAR = ["data=modular", "data.p=11", *TINY]
PAIRS = ["model=encdec", "data=translation", *TINY]
CORPUS = ["data=text", "data.tokenizer=char", "data.val_fraction=0.5", "data.cache_dir={ws}_cache", *TINY]
OFFLINE = {"https_proxy": "http://127.0.0.1:9", "http_proxy": "http://127.0.0.1:9"}  # refused at once

# (id, overrides, fragment of the one message); {ws} is the workspace built below.
CASES = [
    ("type-int", ["model.n_layer=two"], "Value 'two' of type 'str' could not be converted to Integer"),
    ("type-float", ["optim.lr=fast"], "Value 'fast' of type 'str' could not be converted to Float"),
    ("type-bool", ["model.bias=maybe"], "Value 'maybe' is not a valid bool"),
    ("unknown-key", ["model.n_layers=2"], "error: model.n_layers: no such key; did you mean model.n_layer?\n"),
    ("unknown-top-level-key", ["+seeed=1"], "error: seeed: no such key; did you mean seed?\n"),
    (
        "help-unknown-key",
        ["--help", "model.n_layers=2"],
        "error: model.n_layers: no such key; did you mean model.n_layer?\n",
    ),
    ("help-unknown-option", ["--help", "data=nope"], "error: data=nope: no such option; data has: "),
    ("multirun-and-cfg", ["-m", "--cfg", "job", "seed=1,2"], "error: Only one of --run, --multirun, --cfg"),
    ("added-key", ["+model.n_layers=2"], "error: model.n_layers: no such key; did you mean model.n_layer?\n"),
    ("unknown-trainer-key", ["trainer.max_step=10"], "trainer.max_step: no such key; did you mean trainer.max_steps?"),
    (
        "unknown-option",
        ["data=imagenet"],
        "data=imagenet: no such option; data has: labelled, modular, repeats, shakespeare, text, translation",
    ),
    ("seed-type", ["seed=abc"], "seed: Value 'abc' of type 'str' could not be converted to Integer"),
    (
        "a-preset-with-another-model",  # (a key of the preset's own model, which the other's schema has not)
        ["experiment=induction_heads", "model=bert"],
        "error: experiment=induction_heads sets model.mlp, which model=bert does not have: the experiment is made for "
        "its own model; leave model=bert out\n",
    ),
    (
        "slurm-devices",  # a resolver's refusal (config.tasks_per_node), raised while Hydra builds the launcher
        ["-m", "hydra/launcher=slurm_local", "trainer.devices=auto", "hydra.sweep.dir={ws}/sweep"],
        "error: trainer.devices: hydra/launcher=slurm and slurm_local start one task (one process) per device on each "
        "node, so they need a number of devices, 1 or more, got 'auto': add trainer.devices=N\n",
    ),
    (
        "slurm-devices-zero",
        ["-m", "hydra/launcher=slurm", "trainer.devices=0", "hydra.sweep.dir={ws}/sweep"],
        "they need a number of devices, 1 or more, got 0: add trainer.devices=N\n",
    ),
    (
        "slurm-devices-bool",
        ["-m", "hydra/launcher=slurm_local", "trainer.devices=true", "hydra.sweep.dir={ws}/sweep"],
        "they need a number of devices, 1 or more, got True: add trainer.devices=N\n",
    ),
    (
        "attention-kernel-cannot-serve",
        [*MODULAR, "model.dropout=0.1", "attention_kernel=flash", "trainer.max_steps=2"],
        "error: attention_kernel: flash cannot serve this run's attention (torch: No available kernel.  Aborting "
        "execution. Likely the CPU's flash takes no attention dropout, and model.dropout=0.1): use auto or math\n",
    ),
    (
        "attention-kernel-cannot-serve-a-bias",
        ["model=t5", "task=seq2seq", *MODULAR, "model.dropout=0", "attention_kernel=flash", "trainer.max_steps=2"],
        "error: attention_kernel: flash cannot serve this run's attention (torch: No available kernel.  Aborting "
        "execution. Likely an attention mask or bias this model passes (padding, T5's relative positions) is one "
        "it cannot take): use auto or math\n",
    ),
    ("forbidden-output", ["hydra.run.dir=/proc/forbidden"], "cannot create the run directory in /proc"),
    ("heads", ["model.n_embd=100", "model.n_head=3"], "model.n_embd: 100 is not divisible by model.n_head=3"),
    (
        "context",
        ["data.block_size=512", "model.block_size=256"],
        "data.block_size: sequences of 512 tokens exceed the model's maximum, model.block_size=256",
    ),
    ("batch-size", ["data.batch_size=0"], "data.batch_size: must be a positive integer, got 0"),
    ("dropout", ["model.dropout=1.5"], "model.dropout: must be a number in [0, 1), got 1.5"),
    (
        "logit-softcap",
        ["model.logit_softcap=0"],
        "error: model.logit_softcap: must be a number > 0 or null, got 0.0\n",
    ),
    (
        "logit-softcap-inf",
        ["model.logit_softcap=inf"],
        "error: model.logit_softcap: must be a number > 0 or null, got inf\n",
    ),
    ("positions", ["model.pos_encoding=alibi"], "Invalid value 'alibi', expected one of [learned, rope]"),
    (
        "rope-head",
        ["model.pos_encoding=rope", "model.n_embd=36", "model.n_head=4"],
        "model.n_embd: rope needs an even head size, n_embd/n_head = 9",
    ),
    ("not-prime", ["data=modular", "data.p=100"], "data.p: must be a prime"),
    ("operator", ["data=modular", "data.op=pow"], "Invalid value 'pow', expected one of [+, -, *, /]"),
    (
        "train-fraction",
        ["data=modular", "data.train_fraction=1.5"],
        "data.train_fraction: must be a number in (0, 1), got 1.5",
    ),
    ("min-lr", ["optim.min_lr=1"], "optim.min_lr: must be in [0, optim.lr=0.001]"),
    ("betas", ["optim.betas=[0.9,1.5]"], "optim.betas: must be two numbers in [0, 1)"),
    ("optimizer", ["optim.name=sgd"], "Invalid value 'sgd', expected one of [adamw, adafactor, muon]"),
    ("endless", ["trainer.max_steps=-1"], "trainer.max_steps: must be set: task=lm on data=shakespeare draws"),
    ("val-interval", ["trainer.val_check_interval=0.5"], "trainer.val_check_interval: must be a number of steps"),
    ("temperature", ["task.sample.temperature=-1"], "task.sample.temperature: must be a number >= 0, got -1"),
    ("top-k", ["task.sample.top_k=0"], "task.sample.top_k: must be an integer >= 1 or null, got 0"),
    ("gpu", ["hardware=gpu"], "asks for a CUDA GPU but torch sees none"),
    (
        "callback-option-settings-alone",
        ["callbacks=default", "+callbacks.ema.decay=0.99"],
        "callbacks.ema: sets decay of a callback the chosen callbacks do not add (no _target_): add it, e.g. "
        "callbacks=[default,ema], or set callbacks.ema=null",
    ),
    (
        "callback-settings-alone",
        ["experiment=shakespeare_char_cpu", "callbacks=none"],
        "callbacks.last_checkpoint: sets every_n_train_steps of a callback the chosen callbacks do not add (no "
        "_target_): keep callbacks=default, or set callbacks.last_checkpoint=null",
    ),
    (
        "callback-setting-out-of-range",
        ["callbacks=[default,ema]", "callbacks.ema.decay=1.5"],
        "error: callbacks.ema.decay: must be a number in [0, 1], got 1.5\n",
    ),
    (
        "callback-nan",
        ["callbacks=[default,ema]", "callbacks.ema.decay=nan"],
        "callbacks.ema.decay: must be a number in [0, 1], got nan",
    ),
    (
        "callback-grokfast-lamb",
        ["callbacks=[default,grokfast]", "callbacks.grokfast.lamb=nan"],
        "error: callbacks.grokfast.lamb: must be a number >= 0, got nan\n",
    ),
    (
        "callback-steps-zero",
        ["callbacks=[default,ema]", "callbacks.ema.update_every_n_steps=0"],
        "error: callbacks.ema.update_every_n_steps: must be an integer >= 1, got 0\n",
    ),
    (
        "callback-grokfast-alpha",
        ["callbacks=[default,grokfast]", "callbacks.grokfast.alpha=1"],
        "error: callbacks.grokfast.alpha: must be a number in [0, 1), got 1",
    ),
    ("ckpt-missing", [*MODULAR, "ckpt_path={ws}/nowhere.ckpt"], "ckpt_path: no checkpoint file at"),
    ("ckpt-empty-path", [*MODULAR, "ckpt_path="], "ckpt_path: is empty: give last (this run directory's last.ckpt) or"),
    (
        "init-and-resume",
        [*MODULAR, "init_from={ws}/prior", "ckpt_path={ws}/prior/checkpoints/last.ckpt"],
        "init_from: starts a new run from a checkpoint's weights, ckpt_path resumes a run: give one of them",
    ),
    (
        "resume-other-optimizer",
        [*MODULAR, "ckpt_path={ws}/prior/checkpoints/last.ckpt", "optim.name=adafactor", "trainer.max_steps=6"],
        "error: optim.name: {ws}/prior/checkpoints/last.ckpt was trained with optim.name=adamw, and a resume continues "
        "it as it was trained",
    ),
    ("init-missing", [*MODULAR, "init_from={ws}/nowhere"], "init_from: no run directory or checkpoint file at"),
    ("ckpt-last-missing", [*MODULAR, "ckpt_path=last"], "ckpt_path: `last` means"),
    ("ckpt-corrupt", [*MODULAR, "ckpt_path={ws}/corrupt.ckpt"], "is not a readable checkpoint (truncated or corrupt"),
    ("ckpt-empty", [*MODULAR, "ckpt_path={ws}/empty.ckpt"], "empty.ckpt is not a readable checkpoint (truncated or"),
    ("init-empty", [*MODULAR, "init_from={ws}/empty.ckpt"], "empty.ckpt is not a readable checkpoint (truncated or"),
    (
        "ckpt-before-tasks",
        [*MODULAR, "ckpt_path={ws}/before-tasks.ckpt"],
        "before-tasks.ckpt was written by an earlier transformer-lab (checkpoint format 0, this one reads 1): train",
    ),
    (
        "init-before-tasks",
        [*MODULAR, "init_from={ws}/before-tasks.ckpt"],
        "was written by an earlier transformer-lab (checkpoint format 0",
    ),
    (
        "ckpt-other-model",
        [*MODULAR, "model.n_embd=64", "ckpt_path={ws}/prior/checkpoints/last.ckpt"],
        "holds another model than this run's: model.n_embd=64 (the checkpoint's: 32)",
    ),
    (
        "ckpt-other-data",
        ["data=shakespeare", *TINY, "ckpt_path={ws}/prior/checkpoints/last.ckpt"],
        "was trained with data=modular, this run has data=shakespeare",
    ),
    ("data-missing-offline", ["paths.data_dir={ws}/empty"], "put it at {ws}/empty/shakespeare/input.txt"),
    ("data-corrupt", ["paths.data_dir={ws}/corrupt"], "the file is corrupt or a different version"),
    ("unwritable-output", ["hydra.run.dir={ws}/a-file/run"], "cannot create the run directory, {ws}/a-file is a file"),
    (
        "prompt-vocabulary",
        ["data=repeats", "data.sample_prompt=Hello"],
        "data.sample_prompt: characters not in the vocabulary: ['H']; it has only 'ABCDEFabcdefghijklmnopqrstuvwxyz'",
    ),
    (
        "task-architecture",
        ["model=encdec", "task=classify"],
        "task: task=classify trains an encoder-only model, model=encdec is an encoder-decoder; "
        "model=encdec data=shakespeare trains with task=spans; combinations that work: ",
    ),
    (
        "t5-equations",
        ["model=t5", "data=modular"],
        "task: task=spans does not train on data=modular (it reads text; the data gives equations); "
        "model=t5 data=modular trains with task=seq2seq;",
    ),
    ("t5-sentinels", ["model=t5", "task.extra_ids=5"], "task.extra_ids: windows of 141 tokens have 7 noise spans"),
    ("task-option", ["task=lmm"], "task=lmm: no such option; task has: classify, lm, mlm, seq2seq, spans"),
    (  # (an option in a list of them: Hydra names no options then)
        "callbacks-list-option",
        ["callbacks=[default,emaa]"],
        "error: callbacks=emaa: no such option; callbacks has: attention, default, ema, grokfast, none, progress\n",
    ),
    ("task-null", ["task=null"], "Config group override must be a string or a list. Got NoneType"),
    (
        "task-key",
        ["model=t5", "task.sample.top_k=5"],
        "task.sample: no such key; task has: _target_, name, batches, metrics, input_length, noise_density, "
        "mean_noise_span_length, "
        "extra_ids (a setting of task=lm; this run's is task=spans)",
    ),
    (
        "bert-text-default-task",
        ["model=bert", "data=shakespeare"],
        "task: task=classify does not train on data=shakespeare (it reads equations, labelled; the data gives text); "
        "model=bert data=shakespeare trains with task=mlm; "
        "combinations that work: model=bert data=labelled, model=bert data=modular, model=bert data=repeats task=mlm, "
        "model=bert data=shakespeare task=mlm, model=bert data=text task=mlm, model=bert data=translation task=mlm, ",
    ),
    ("mlm-probabilities", ["model=bert", "task=mlm", "task.mask_token_prob=0.95"], "task.random_token_prob: "),
    (
        "pretrained-lr-alone",
        [*MODULAR, "optim.pretrained_lr=1e-4"],
        "optim.pretrained_lr: applies to the weights init_from loads: give init_from",
    ),
    (
        "malformed-tsv",
        ["model=encdec", "data=translation", "data.path={ws}/bad.tsv"],
        "bad.tsv:2: expected 2 tab-separated fields, found 1",
    ),
    ("labelled-no-path", ["model=bert", "data=labelled"], "data.path: give a file of text<TAB>label lines"),
    (
        "labelled-learned-kind",
        ["model=bert", "data=labelled", "data.path={ws}/one_label.tsv", "data.tokenizer=bpe"],
        "error: data.tokenizer: bpe is a kind data=text learns; data=labelled learns a BPE when data.tokenizer is "
        "left out (null), or reads a pretrained one: a tokenizer.json, a directory holding one, or a Hugging Face "
        "name\n",
    ),
    (
        "labelled-tokenizer-not-loading",
        ["model=bert", "data=labelled", "data.path={ws}/two_labels.tsv", "data.tokenizer={ws}/bad.tsv"],
        "does not load as a tokenizer (",
    ),
    (
        "task-section-at-the-top",
        ["sample.temperature=0.5"],
        "error: sample: no such key; the config has: seed, ckpt_path, overwrite, init_from, init_strict, model_sizes, "
        "attention_kernel, objective, model, data, task, trainer, optim, logger, callbacks, paths "
        "(task.sample is a setting of task=lm)\n",
    ),
    (
        "init-from-hf-cut-short",
        ["data=text", "data.path={ws}/short.txt", "init_from=hf:{ws}/hf_cut"],
        "hf_cut/model.safetensors is not a readable safetensors file (its header is cut short)\n",
    ),
    (
        "init-from-hf-no-tokenizer",
        ["data=text", "data.path={ws}/short.txt", "init_from=hf:{ws}/hf_no_tokenizer"],
        "hf_no_tokenizer has no tokenizer.json, and data.tokenizer=bpe would read text with a tokenizer made here",
    ),
    (
        "labelled-one-label",
        ["model=bert", "data=labelled", "data.path={ws}/one_label.tsv"],
        "one_label.tsv: holds 2 labelled text(s) of fewer than two labels: nothing to classify",
    ),
    (
        "labelled-malformed",
        ["model=bert", "data=labelled", "data.path={ws}/bad.tsv"],
        "bad.tsv:2: expected text<TAB>label, found 1 tab-separated fields",
    ),
    (
        "translation-tokenizer-two-vocabularies",
        ["model=encdec", "data=translation", "data.tokenizer=x.json", "data.shared_vocab=false"],
        "data.shared_vocab: a pretrained data.tokenizer serves both languages: leave shared_vocab true",
    ),
    ("model-sizes", ["model_sizes=5"], "model_sizes: null or integer sizes of vocab_size"),
    (  # (by hand: named as given, not as an init_from checkpoint's, which it is not)
        "model-sizes-too-small",
        [*MODULAR, "model_sizes={vocab_size:5}"],
        "error: model_sizes.vocab_size: is 5, the data needs 16\n",
    ),
    (
        "init-from-hf-incomplete-config",
        ["init_from=hf:{ws}/hf_incomplete"],
        "init_from: hf:{ws}/hf_incomplete: its config.json has no n_embd (a gpt2 config needs it)",
    ),
    (
        "init-from-hf-missing",
        ["init_from=hf:{ws}/no-such-model"],
        "init_from: hf:{ws}/no-such-model: no Transformers model directory at {ws}/no-such-model",
    ),
    (
        "empty-tsv",
        ["model=encdec", "data=translation", "data.path={ws}/empty.tsv"],
        "empty.tsv: holds no sentence pairs",
    ),
    ("language", ["model=encdec", "data=translation", "data.target=es"], "data.target: Multi30k has de, en, fr"),
    (
        "header-only-tsv",
        [*PAIRS, "data.path={ws}/header.tsv"],
        "header.tsv: holds 1 sentence pair(s), too few to split",
    ),
    (
        "gzipped-tsv",
        [*PAIRS, "data.path={ws}/pairs.tsv.gz"],
        "pairs.tsv.gz: is gzip-compressed (gunzip it first), not text",
    ),
    ("latin1-tsv", [*PAIRS, "data.path={ws}/latin1.tsv"], "latin1.tsv:2: is not UTF-8 text (byte 0xfc at column 7)"),
    ("binary-text", ["data.path={ws}/binary.txt"], "data.path: {ws}/binary.txt:1: is binary, not text (a NUL byte)"),
    ("folder-as-text", ["data.path={ws}"], "data.path: {ws}: is a directory, not a file"),
    (
        "short-text",
        ["data.path={ws}/short.txt", "data.block_size=16"],
        "9 characters to validate on, fewer than one window of data.block_size + 1 = 17",
    ),
    (
        "tiny-val-fraction",
        ["data.val_fraction=0.0000001"],
        "1 characters to validate on, fewer than one window of data.block_size + 1 = 257 (data.val_fraction=1e-07 of",
    ),
    (
        "model-beyond-memory",
        ["data=modular", "data.p=11", "model.n_layer=1", "model.n_head=2", "model.n_embd=1000000000000"],
        "error: model: model=gpt of these sizes (model.* and the data's: its vocabulary, its sequence length) need more "
        "memory than this machine can allocate (",
    ),
    (
        "vocabulary-beyond-memory",
        ["data=modular", "data.p=100000000003"],
        "error: model: model=gpt of these sizes (model.* and the data's: its vocabulary, its sequence length) need more",
    ),
    ("decay-steps", ["optim.decay_steps=-5"], "error: optim.decay_steps: must be an integer >= 1 or null, got -5\n"),
    ("max-time", ["trainer.max_time=soon"], "trainer.max_time: `Timer(duration='soon')` is not a valid duration"),
    ("accelerator", ["trainer.accelerator=npu"], "trainer.accelerator: You selected an invalid accelerator name"),
    ("precision", ["trainer.precision=17"], "trainer.precision: Precision 17 is invalid. Allowed precision values"),
    ("strategy", ["trainer.strategy=fsdp3"], "trainer.strategy: You selected an invalid strategy name"),
    ("limit-fraction", ["trainer.limit_val_batches=1.5"], "trainer.limit_val_batches: must be a number of batches"),
    ("log-every", ["trainer.log_every_n_steps=0"], "trainer.log_every_n_steps: must be an integer >= 1, got 0"),
    ("seed-negative", ["seed=-1"], "seed: must be in [0, 4294967295] (what seed_everything takes), got -1"),
    (
        "seed-too-big",
        ["seed=4294967296"],
        "seed: must be in [0, 4294967295] (what seed_everything takes), got 4294967296",
    ),
    ("overwrite-type", ["overwrite=maybe"], "overwrite: must be true or false, got 'maybe'"),
    ("overwrite-number", ["overwrite=2"], "overwrite: must be true or false, got 2"),  # (not taken for true)
    ("overwrite-one", ["overwrite=1"], "overwrite: must be true or false, got 1"),  # (1 == True, yet not a flag)
    (
        "seed-interpolation",
        ["seed=${oc.env:TRANSFORMER_LAB_NO_SUCH_VARIABLE}"],
        'error: seed: KeyError raised while resolving interpolation: "Environment variable '
        "'TRANSFORMER_LAB_NO_SUCH_VARIABLE' not found\" (in ${oc.env:TRANSFORMER_LAB_NO_SUCH_VARIABLE})\n",
    ),
    (  # (known once the run has its summary: the run is kept, the objective's mistake one line)
        "objective-not-in-summary",
        [*MODULAR, "trainer.max_steps=2", "objective=val/nope"],
        "error: objective=val/nope is not a number in this run's summary.json (it has: ",
    ),
    (
        "attention-kernel-unknown",
        ["attention_kernel=fast"],
        "attention_kernel: Invalid value 'fast', expected one of [auto, math, flash, efficient, cudnn]",
    ),
    (
        "overwrite-and-resume",
        [*MODULAR, "overwrite=true", "ckpt_path={ws}/prior/checkpoints/last.ckpt"],
        "overwrite: deletes what a run directory holds, ckpt_path resumes from it: give one of them",
    ),
    ("corpus-missing", ["data=text"], "data.path: give the corpus: data.path=FILE|DIR|GLOB"),
    ("corpus-empty", [*CORPUS, "data.path={ws}/empty.txt"], "data.path: {ws}/empty.txt: no text (an empty corpus)"),
    (
        "corpus-short",
        [*CORPUS, "data.path={ws}/short_docs.txt", "data.block_size=60"],
        "data.path: {ws}/short_docs.txt: its training documents (of 4; data.val_fraction=0.5) have 21 tokens, "
        "fewer than one window of data.block_size + 1 = 61",
    ),
    ("corpus-no-files", [*CORPUS, "data.path={ws}/empty"], "data.path: {ws}/empty: a directory with no .txt"),
    ("corpus-no-match", [*CORPUS, "data.path={ws}/*.csv"], "data.path: {ws}/*.csv: no .txt, .jsonl, .parquet files"),
    ("corpus-latin1", [*CORPUS, "data.path={ws}/latin1.txt"], "latin1.txt: is not UTF-8 text (byte 0xe9 at offset 3)"),
    ("corpus-binary", [*CORPUS, "data.path={ws}/pairs.tsv.gz"], "pairs.tsv.gz: is not a .txt, .jsonl, .parquet file"),
    (
        "corpus-tokenizer",
        [*CORPUS, "data.path={ws}/short.txt", "data.tokenizer={ws}/bad.tsv"],
        "data.tokenizer: {ws}/bad.tsv does not load as a tokenizer",
    ),
    (
        "corpus-tokenizer-json",
        [*CORPUS, "data.path={ws}/short.txt", "data.tokenizer={ws}/nowhere.json"],
        "data.tokenizer: {ws}/nowhere.json: no such file",
    ),
    (
        "corpus-uint16",
        [*CORPUS, "data.path={ws}/short.txt", "data.tokenizer={ws}/big_tokenizer.json", "data.token_dtype=uint16"],
        "data.token_dtype: uint16 holds ids below 65,536 but the tokenizer has 70,002",
    ),
    (
        "corpus-dtype",
        [*CORPUS, "data.token_dtype=int8"],
        "Invalid value 'int8', expected one of [auto, uint16, uint32]",
    ),
    # every override form is one line (issue "Nothing half-done" item 2)
    (
        "dict-override-key",
        ["optim={muon_lrr: 0.1}"],
        "error: optim.muon_lrr: no such key; did you mean optim.muon_lr?\n",
    ),
    (
        "dict-override-suggestion",
        ["data=modular", "data.model_defaults={n_layers: 1}"],
        "error: data.model_defaults.n_layers: no such key; did you mean data.model_defaults.n_layer?\n",
    ),
    (
        "model-yaml-not-utf8",
        ["model=latin", "hydra.searchpath=[file://{ws}/conf]"],
        "error: {ws}/conf/model/latin.yaml:2: is not UTF-8 text (byte 0xe9 at column 6)\n",
    ),
    (
        "model-yaml-not-yaml",
        ["model=broken", "hydra.searchpath=[file://{ws}/conf_broken]"],
        "error: {ws}/conf_broken/model/broken.yaml:3: is not YAML (found unexpected end of stream)\n",
    ),
    (
        "delete-section",
        ["~optim"],
        "error: ~optim: a run needs its optim section; set its keys (optim.KEY=VALUE) instead\n",
    ),
    ("delete-group", ["~data"], "error: ~data: a run needs its data section; choose one (data=OPTION) instead\n"),
    (
        "delete-callbacks",
        ["~callbacks"],
        "error: ~callbacks: a run needs its callbacks section; callbacks=none instead\n",
    ),
    ("delete-seed", ["~seed"], "error: ~seed: a run needs its seed setting; give seed=VALUE instead\n"),
    (
        "section-as-option",
        ["optim=muon"],
        "error: optim=muon: optim is a section of settings, not an option: set its keys, e.g. optim.name=muon\n",
    ),
    ("section-as-null", ["trainer=null"], "error: trainer=null: trainer is a section of settings, not an option"),
    (
        "resume-section-as-option",
        ["ckpt_path={ws}/prior/checkpoints/last.ckpt", "optim=5"],
        "error: optim=5: optim is a section of settings, not an option: set its keys, e.g. optim.KEY=VALUE\n",
    ),
    # every check before the run directory is claimed (item 1): none of these leaves a directory
    (
        "model-yaml-missing-key",
        ["model=noname", "hydra.searchpath=[file://{ws}/conf]", "data=modular", "data.p=11"],
        "error: model.n_embd: Interpolation key 'model.name' not found (in ${model.name})\n",
    ),
    (
        "suggested-size-type",
        ["data=modular", "data.p=11", "data.model_defaults.n_layer=1.5"],
        "error: data.model_defaults.n_layer: Value '1.5' of type 'float' could not be converted to Integer\n",
    ),
    (
        "attention-callback-text",
        [*MODULAR, "callbacks=[default,attention]", 'callbacks.attention.text="3 + @ ="'],
        "error: callbacks.attention.text: @: not a number in 0..10 (data.p=11)\n",
    ),
    # a resume continues what was trained: the keys it may not change are named (item 3)
    (
        "resume-data-setting",
        ["ckpt_path={ws}/prior/checkpoints/last.ckpt", "data.train_fraction=0.4", "trainer.max_steps=6"],
        "error: data.train_fraction: {ws}/prior/checkpoints/last.ckpt was trained with data.train_fraction=0.5, and a "
        "resume continues it as it was trained (it may change only ckpt_path, trainer, logger, callbacks, paths, ",
    ),
    (
        "resume-seed",
        ["ckpt_path={ws}/prior/checkpoints/last.ckpt", "seed=5", "trainer.max_steps=6"],
        "error: seed: {ws}/prior/checkpoints/last.ckpt was trained with seed=1337, and a resume continues it",
    ),
    (
        "resume-fast-dev-run",
        ["ckpt_path={ws}/prior/checkpoints/last.ckpt", "debug=fast"],
        "error: trainer.fast_dev_run: debug=fast runs a few batches of a new run and cannot continue "
        "{ws}/prior/checkpoints/last.ckpt: resume without debug=fast, or smoke-test a new run in another hydra.run.dir\n",
    ),
    (  # (Lightning's refusal as fit starts, told in one line: its MisconfigurationException)
        "resume-past-max-epochs",
        ["ckpt_path={ws}/prior/checkpoints/last.ckpt", "trainer.max_steps=6", "trainer.max_epochs=2"],
        "error: trainer: Lightning refuses this run's settings: You restored a checkpoint with current_epoch=3, but "
        "you have set Trainer(max_epochs=2).\n",
    ),
    (
        "gpt-two-vocabularies",
        ["model=gpt", "data=translation", "data.shared_vocab=false"],
        "data.shared_vocab: a decoder-only model reads source and target as one sequence",
    ),
]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    ws = tmp_path_factory.mktemp("ws")
    result = run_train(*MODULAR, "trainer.max_steps=3", "logger=none", f"hydra.run.dir={ws / 'prior'}")
    assert result.returncode == 0, result.stderr[-2000:]
    checkpoint = (ws / "prior" / "checkpoints" / "last.ckpt").read_bytes()
    (ws / "corrupt.ckpt").write_bytes(checkpoint[: len(checkpoint) // 3])
    (ws / "empty.ckpt").write_bytes(b"")
    # as an earlier transformer-lab wrote it: no checkpoint format
    old = torch.load(ws / "prior" / "checkpoints" / "last.ckpt", weights_only=True)
    del old["transformer_lab"]["format"]
    torch.save(old, ws / "before-tasks.ckpt")
    (ws / "empty").mkdir()
    (ws / "corrupt" / "shakespeare").mkdir(parents=True)
    (ws / "corrupt" / "shakespeare" / "input.txt").write_text("To be, or not to be\n")
    (ws / "a-file").write_text("not a folder\n")
    (ws / "conf" / "model").mkdir(parents=True)  # a user's config groups: a YAML not in UTF-8, one without name:
    (ws / "conf" / "model" / "latin.yaml").write_bytes("name: latin\n# caf\u00e9\n".encode("latin-1"))
    (ws / "conf_broken" / "model").mkdir(parents=True)  # a YAML that does not parse (a quote left open)
    (ws / "conf_broken" / "model" / "broken.yaml").write_text('_target_: mine.X\nname: "x\n')
    (ws / "conf" / "model" / "noname.yaml").write_text(
        "_target_: transformer_lab.models.gpt.GPT\nn_layer: 1\nn_head: 2\nn_embd: ${model.name}\n"
    )
    (ws / "bad.tsv").write_text("ein Hund\ta dog\nzwei Hunde two dogs\n")
    (ws / "empty.tsv").write_text("")
    (ws / "hf_incomplete").mkdir()
    (ws / "hf_incomplete" / "config.json").write_text('{"model_type": "gpt2"}')
    (ws / "one_label.tsv").write_text("a good play\tpositive\na fine play\tpositive\n")
    (ws / "two_labels.tsv").write_text("a good play\tpositive\na bad play\tnegative\n" * 10)
    # Transformers directories: one whose weights were cut short, one without its tokenizer
    config = {"model_type": "gpt2", "vocab_size": 99, "n_positions": 32, "n_embd": 16, "n_layer": 1, "n_head": 2}
    for name in ("hf_cut", "hf_no_tokenizer"):
        (ws / name).mkdir()
        (ws / name / "config.json").write_text(json.dumps(config))
    (ws / "hf_cut" / "tokenizer.json").write_text("{}")
    (ws / "hf_cut" / "model.safetensors").write_bytes(b"\x08\x00\x00\x00")  # a header's length, and no header
    from safetensors.torch import save_file

    save_file({"transformer.wte.weight": torch.zeros(99, 16)}, str(ws / "hf_no_tokenizer" / "model.safetensors"))
    (ws / "header.tsv").write_text("source\ttarget\n")
    (ws / "pairs.tsv.gz").write_bytes(gzip.compress(b"ein Hund\ta dog\n" * 50))
    (ws / "latin1.tsv").write_bytes("ein Hund\ta dog\nzwei H\u00fcnde\ttwo dogs\n".encode("latin-1"))
    (ws / "binary.txt").write_bytes(bytes(range(256)) * 8)
    (ws / "short.txt").write_text("To be, or not to be, that is the question.\n" * 2)
    (ws / "empty.txt").write_text("\n\n \n")
    (ws / "short_docs.txt").write_text("\n\n".join(["To be, or not to be", "that is the question"] * 2))
    (ws / "latin1.txt").write_bytes("caf\u00e9 h\u00fcbsch\n".encode("latin-1"))
    from tokenizers import Tokenizer, models

    vocab = {f"w{i}": i for i in range(70_000)} | {"<unk>": 70_000}
    Tokenizer(models.WordLevel(vocab, unk_token="<unk>")).save(str(ws / "big_tokenizer.json"))
    return ws


def snapshot(folder):
    return {
        p.relative_to(folder): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.mark.parametrize("overrides,fragment", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_gives_one_clear_message(overrides, fragment, workspace, tmp_path):
    if "hardware=gpu" in overrides and torch.cuda.is_available():
        pytest.skip("a GPU is present")
    needs_text = not any(o.startswith(("data=modular", "data=translation")) for o in overrides)
    if (
        needs_text
        and "paths.data_dir" not in " ".join(overrides)
        and not (ROOT / "data/shakespeare/input.txt").exists()
    ):
        pytest.skip("tiny Shakespeare missing: run `make data`")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "notes.txt").write_text("a user's own file, which no refused run may touch\n")
    before = snapshot(workspace), snapshot(run_dir)

    overrides = [o.replace("{ws}", str(workspace)) for o in overrides]
    if not any(o.startswith("hydra.run.dir=") for o in overrides):
        overrides.append(f"hydra.run.dir={run_dir}")
    result = run_train(*overrides, "logger=none", env=OFFLINE)  # (offline: a download is refused at once)

    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert fragment.replace("{ws}", str(workspace)) in output, output[-2000:]
    assert "Traceback" not in output
    after_ws, after_run = snapshot(workspace), snapshot(run_dir)
    assert after_ws == before[0]  # nothing outside the run changed
    assert {k: v for k, v in after_run.items() if k in before[1]} == before[1]  # the earlier run's files intact


FAILING_BEFORE_TRAINING = [
    "model-yaml-missing-key",
    "suggested-size-type",
    "attention-callback-text",
    "task-architecture",
    "not-prime",
    "data-missing-offline",
    "malformed-tsv",
    "unknown-key",
    "callback-setting-out-of-range",
]


@pytest.mark.parametrize("case", FAILING_BEFORE_TRAINING)
def test_a_run_that_fails_before_training_leaves_nothing_on_disk(case, workspace, tmp_path):
    overrides = next(c[1] for c in CASES if c[0] == case)
    overrides = [o.replace("{ws}", str(workspace)) for o in overrides]
    if not any(o.startswith("paths.data_dir") for o in overrides):
        overrides.append(f"paths.data_dir={tmp_path / 'data'}")  # (an empty one: a download is refused)
    result = run_train(*overrides, f"hydra.run.dir={tmp_path / 'run'}", "logger=none", env=OFFLINE)
    assert result.returncode == 2 and "error: " in result.stderr, result.stderr[-2000:]
    assert list(tmp_path.iterdir()) == [], list(tmp_path.rglob("*"))  # no run directory, no data folder


def test_data_missing_offline_names_url_and_checksum(workspace, tmp_path):
    result = run_train(f"paths.data_dir={workspace / 'empty'}", "logger=none", f"hydra.run.dir={tmp_path}", env=OFFLINE)
    assert result.returncode == 2
    for part in (
        "could not download input.txt",
        "https://raw.githubusercontent.com/karpathy/char-rnn/",
        "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
    ):
        assert part in result.stderr
    assert not any((workspace / "empty").rglob("*.txt"))


def test_a_sweep_whose_every_trial_fails_ends_in_one_line_naming_their_logs(tmp_path):
    result = run_train(
        "-m",
        "hydra/sweeper=optuna",
        "objective=val/loss_best",
        *MODULAR,
        "trainer.max_steps=3",
        "logger=none",
        "hydra.sweeper.n_trials=2",
        "hydra.sweeper.max_failure_rate=1.0",
        "optim.lr=choice(-1,-2)",  # never positive
        f"hydra.sweep.dir={tmp_path}",
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: every trial failed (2; the first: optim.lr: must be a number > 0, got -"), last
    for job in ("0", "1"):
        assert str(tmp_path / job / "train.log") in last
        assert "error: optim.lr: must be a number > 0" in (tmp_path / job / "train.log").read_text()


def test_a_shell_setting_hydra_full_error_0_still_gets_one_line(tmp_path):
    result = run_train("model.n_layers=2", f"hydra.run.dir={tmp_path / 'run'}", env={"HYDRA_FULL_ERROR": "0"})
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr == "error: model.n_layers: no such key; did you mean model.n_layer?\n"


def test_a_users_own_train_log_or_hydra_folder_is_never_replaced_by_a_new_run(tmp_path):
    """A new run writes its record in .hydra/ and its log in train.log: where the folder holds a user's own (no run's
    manifest lists them) it is refused in one line and they stay; what a run's attempt that never trained left there
    (its manifest lists them) a new run replaces."""
    run_dir = tmp_path / "run"
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / ".hydra" / "mynotes.txt").write_text("mine\n")
    (run_dir / "train.log").write_text("MY OWN LOG, keep\n")
    settings = [*MODULAR, "trainer.max_steps=2", "logger=none", f"hydra.run.dir={run_dir}"]
    refused = run_train(*settings)
    assert run_train(*settings, "overwrite=true").stderr == refused.stderr  # (it replaces a run's files only)
    assert refused.returncode == 2 and refused.stderr.splitlines()[-1] == (
        f"error: hydra.run.dir={run_dir} holds .hydra and train.log, which no run wrote: a run writes its own files "
        "under those names; move them, or choose another hydra.run.dir"
    )
    assert sorted(p.name for p in run_dir.iterdir()) == [".hydra", "train.log"]
    assert (run_dir / "train.log").read_text() == "MY OWN LOG, keep\n"
    assert [p.name for p in (run_dir / ".hydra").iterdir()] == ["mynotes.txt"]

    (run_dir / ".hydra" / "mynotes.txt").unlink()  # (now as a failed attempt leaves them: its manifest lists them)
    (run_dir / ".hydra" / "config.yaml").write_text("the attempt's record\n")
    (run_dir / "train.log").write_text("the attempt's error\n")
    (run_dir / ".manifest").write_text(".hydra/config.yaml\n.hydra\ntrain.log\n")
    trained = run_train(*settings)
    assert trained.returncode == 0, trained.stderr[-2000:]
    assert "the attempt's error" not in (run_dir / "train.log").read_text()
    assert (run_dir / ".hydra" / "config.yaml").read_text() != "the attempt's record\n"


def test_a_resume_below_the_step_of_a_run_that_did_not_complete_is_one_line_and_changes_nothing(workspace, tmp_path):
    """Lightning would stop at once and the run would be called completed, having trained nothing (a completed run
    so resumed has nothing to do: said so, exit 0)."""
    import shutil

    run = tmp_path / "stopped"
    shutil.copytree(workspace / "prior", run)
    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**summary, "status": "interrupted"}))  # (as a Ctrl-C at step 3)
    before = snapshot(run)
    refused = run_train("ckpt_path=last", "trainer.max_steps=2", f"hydra.run.dir={run}")
    assert refused.returncode == 2 and refused.stderr.splitlines() == [
        f"error: trainer.max_steps: {run}/checkpoints/last.ckpt is at step 3, past trainer.max_steps=2: a resume "
        "trains on from its step; give a higher trainer.max_steps, or leave it out (the run's own)"
    ]
    assert snapshot(run) == before


def test_resuming_a_run_that_saved_no_checkpoint_says_so(tmp_path):
    run = tmp_path / "stopped"  # (as a run stopped before its first checkpoint leaves itself: summary.json, no ckpt)
    run.mkdir()
    (run / "summary.json").write_text(json.dumps({"status": "interrupted", "global_step": 10}))
    refused = run_train("ckpt_path=last", f"hydra.run.dir={run}")
    assert refused.returncode == 2 and refused.stderr.splitlines() == [
        f"error: ckpt_path: `last` means {run}/checkpoints/last.ckpt, and the run in {run} saved no checkpoint (it "
        "stopped before its first): nothing to resume; start it again with overwrite=true"
    ]
    assert sorted(p.name for p in run.iterdir()) == ["summary.json"]
