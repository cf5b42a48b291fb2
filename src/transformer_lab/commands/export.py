"""A run's model as a Transformers directory: config.json, model.safetensors, tokenizer.json and
tokenizer_config.json, which `AutoModelFor...from_pretrained(OUT_DIR)` and `AutoTokenizer.from_pretrained(OUT_DIR)`
load (pretrained/ has the families and their tables).

    python -m transformer_lab export outputs/DATE/TIME exported/   # a run directory (its best.ckpt) or a .ckpt
    python -m transformer_lab export outputs/DATE/TIME exported/ overwrite=true   # replace what exported/ holds

Everything is checked before anything is written, and the files are written into a temporary directory
beside OUT_DIR that is renamed into place: OUT_DIR is new (or an empty directory), or, with overwrite=true, the
directory it was is replaced whole (a model directory's other files would otherwise sit beside the new ones).
`overwrite=true` replaces only a model directory (a config.json and a model's other files, nothing else: not a
run, not your notes), never what holds the checkpoint exported, the working directory or one above it. A classifier's config.json names its
classes (`id2label`, `label2id`) as its data named them, and its tokenizer adds the `[CLS] ... [SEP]` it read.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import os
import shutil
from pathlib import Path

from transformer_lab.choices import check_flag
from transformer_lab.commands.cli import Command, run_command
from transformer_lab.errors import UserError
from transformer_lab.store.atomic import unmakeable

log = logging.getLogger(__name__)


def char_tokenizer(chars: list[str], end_of_text: str | None):
    """A character vocabulary as a tokenizers.Tokenizer: one piece per character, joined back as written."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    vocab = {c: i for i, c in enumerate(chars)}
    if end_of_text is not None:
        vocab[end_of_text] = len(chars)
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token=end_of_text or chars[0]))
    # every character its own piece, newlines too ("(?s)." is no Oniguruma syntax: tokenizers refuses it)
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tokenizer.decoder = decoders.Fuse()
    if end_of_text is not None:
        tokenizer.add_special_tokens([end_of_text])
    return tokenizer


def tokenizer_of(meta: dict):
    """The checkpoint's tokenizer as a tokenizers.Tokenizer, and its end-of-text token."""
    from tokenizers import Tokenizer

    saved = meta.get("tokenizer")
    if saved is None and meta.get("vocab") and all(isinstance(c, str) and len(c) == 1 for c in meta["vocab"]):
        return char_tokenizer(meta["vocab"], None), None  # tiny Shakespeare's characters
    if saved is None:
        raise UserError("export: this run's data has no tokenizer Transformers can read (its vocabulary is its own)")
    if meta.get("source_tokenizer"):
        raise UserError("export: data.shared_vocab=false: two tokenizers, where a Transformers directory has one")
    saved_json = json.loads(saved)
    kind = saved_json.get("kind")
    if kind == "char":
        return char_tokenizer(saved_json["chars"], saved_json["end_of_text"]), saved_json["end_of_text"]
    if kind == "huggingface":
        return Tokenizer.from_str(saved_json["tokenizer"]), saved_json["end_of_text"]
    if kind is None:  # a translation run's: the tokenizers.Tokenizer itself
        tokenizer = Tokenizer.from_str(saved)
        return tokenizer, next((t for t in ("</s>", "<eos>") if tokenizer.token_to_id(t) is not None), None)
    raise UserError(f"export: data.tokenizer={kind}: no Transformers tokenizer expresses it here")


def special_ids(tokenizer, end_of_text: str | None, s: dict) -> tuple[dict, dict]:
    """The token ids a Transformers config names, and the tokens tokenizer_config.json names."""
    ids, tokens = {}, {}
    if end_of_text is not None:
        ids["eos_token_id"] = ids["bos_token_id"] = tokenizer.token_to_id(end_of_text)
        tokens["eos_token"] = tokens["bos_token"] = end_of_text
    for name in ("<s>", "<bos>", "[CLS]"):
        if tokenizer.token_to_id(name) is not None:
            ids["bos_token_id"], tokens["bos_token"] = tokenizer.token_to_id(name), name
            break
    pad = s.get("pad_id")
    if pad is not None and pad < tokenizer.get_vocab_size(with_added_tokens=True):
        tokens["pad_token"] = tokenizer.id_to_token(pad)
    for name, token in (
        ("unk_token", "[UNK]"),
        ("mask_token", "[MASK]"),
        ("sep_token", "[SEP]"),
        ("cls_token", "[CLS]"),
    ):
        if tokenizer.token_to_id(token) is not None:
            tokens[name] = token
    return ids, tokens


def class_names(meta: dict, n_classes: int) -> list[str]:
    """A classifier's classes as its data named them: its labels (data=labelled), else their numbers."""
    labels = meta.get("labels")
    return [str(label) for label in labels] if labels else [str(i) for i in range(n_classes)]


def with_classifier_specials(tokenizer, specials):
    """A classifier reads `[CLS] text [SEP]` (its data's start and end ids: batching/labelled.py): a tokenizer
    learned here adds them on Transformers' side too, as a pretrained BERT's own post-processor does."""
    from tokenizers import processors

    if tokenizer.post_processor is not None or specials is None:
        return tokenizer
    bos, eos = tokenizer.id_to_token(specials.bos), tokenizer.id_to_token(specials.eos)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A {eos}", special_tokens=[(bos, specials.bos), (eos, specials.eos)]
    )
    return tokenizer


# What a Transformers model directory holds (save_pretrained's files, a hub repository's): overwrite=true replaces a
# directory of these alone; anything else in it (a run, notes, a subfolder) is refused by name.
MODEL_FILES = (
    "config.json", "generation_config.json", "*.safetensors", "*.safetensors.index.json", "pytorch_model*.bin",
    "*.bin.index.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
    "vocab.json", "vocab.txt", "merges.txt", "*.model", "*.spm", "README.md", ".gitattributes",
)  # fmt: skip


def check_out_dir(out: Path, overwrite: bool, checkpoint: Path) -> None:
    """OUT_DIR may be written: a new path, an empty directory, or, with overwrite=true, a model directory to
    replace (MODEL_FILES alone, a config.json among them). Never what holds the checkpoint being exported,
    the working directory or one above it, the home directory or the root."""
    if out.is_symlink():
        raise UserError(f"export: {out} is a symbolic link: give the directory itself ({out.resolve()})")
    if out.exists() and not out.is_dir():
        raise UserError(f"export: {out} is a file, not a directory: give a directory to write the model into")
    held = sorted(out.iterdir()) if out.is_dir() else []
    if held and not overwrite:
        listed = ", ".join(p.name for p in held[:4]) + (", ..." if len(held) > 4 else "")
        raise UserError(
            f"export: {out} is not empty ({listed}): choose a new directory, or add overwrite=true to replace it "
            "whole (a model directory only)"
        )
    if held:
        real, here = out.resolve(), Path.cwd().resolve()
        why = (
            "the root" if real == Path("/") else "your home directory" if real == Path.home().resolve()
            else "the working directory or one above it" if real == here or real in here.parents
            else f"what holds {checkpoint}" if checkpoint.resolve().is_relative_to(real) else None
        )  # fmt: skip
        if why:
            raise UserError(f"export: overwrite=true would delete {out}, {why}: choose a new directory")
        foreign = [p.name + ("/" if p.is_dir() else "") for p in held
                   if p.is_dir() or not any(fnmatch.fnmatch(p.name, pattern) for pattern in MODEL_FILES)]  # fmt: skip
        if foreign or not (out / "config.json").is_file():
            what = (
                f"holds {', '.join(foreign[:4])}{', ...' if len(foreign) > 4 else ''}"
                if foreign
                else "has no config.json"
            )
            raise UserError(
                f"export: {out} {what}: not a model directory overwrite=true replaces (it deletes the directory "
                "whole); choose a new directory"
            )
    parent, why = unmakeable(out.resolve().parent)  # (replacing a directory, or making one: its parent's to allow)
    if why == "is a file":
        raise UserError(f"export: cannot create {out}: {parent} is a file")
    if why is not None:
        raise UserError(f"export: cannot write into {parent} ({why})")


def export(target: str | Path, out_dir: str | Path, overwrite: bool = False) -> Path:
    from transformer_lab.pretrained.hub import require_pretrained
    from transformer_lab.pretrained.twin import family_for, settings_of
    from transformer_lab.run.build import datamodule_from_checkpoint, load_model
    from transformer_lab.store.atomic import DiskRefused, staging_folder
    from transformer_lab.store.checkpoint import checkpoint_of

    out = Path(os.path.abspath(out_dir))  # ("sub/.." is the directory it names)
    path = checkpoint_of(target)
    check_out_dir(out, overwrite, path)
    require_pretrained("export")
    from safetensors.torch import save_file

    model, meta = load_model(path)
    s = settings_of(model)
    family = family_for(model, s)
    tokenizer, end_of_text = tokenizer_of(meta)
    ids, tokens = special_ids(tokenizer, end_of_text, s)
    specials = datamodule_from_checkpoint(meta).data.specials if "data" in meta["config"] else None  # (its data's)
    if model.architecture == "encoder-decoder" and specials is not None:  # (generate() starts at the run's <bos>)
        ids["decoder_start_token_id"] = specials.bos
    config = {"model_type": family.model_type, **family.hf_config(s, ids), "torch_dtype": "float32"}
    if config.get("num_labels"):
        names = class_names(meta, config["num_labels"])
        config["id2label"] = dict(enumerate(names))
        config["label2id"] = {name: i for i, name in enumerate(names)}
        tokenizer = with_classifier_specials(tokenizer, specials)
    tensors = {k: v.detach().clone().contiguous() for k, v in family.to_hf(model.state_dict(), s).items()}
    length = s.get("block_size") or 512
    tokenizer_config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": length, **tokens}

    created = next((p for p in reversed([out, *out.parents]) if not p.exists()), None)  # (removed on a failure)
    try:  # the one writer's staging folder (store/atomic.py): gone on any error, Ctrl-C or SIGTERM, a full disk one line
        with staging_folder(out, "export") as staging:
            save_file(tensors, str(staging / "model.safetensors"), metadata={"format": "pt"})
            (staging / "config.json").write_text(json.dumps(config, indent=2) + "\n")
            tokenizer.save(str(staging / "tokenizer.json"))
            (staging / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2) + "\n")
            mask = current_umask()  # (the files as open would make them: safetensors writes 0600)
            for file in staging.iterdir():
                os.chmod(file, 0o666 & ~mask)
            old = replace_dir(staging, out)
    except BaseException as e:
        if created is not None and created != out:
            shutil.rmtree(created, ignore_errors=True)
        if isinstance(e, (DiskRefused, OSError)):
            why = e.why if isinstance(e, DiskRefused) else e.strerror or e
            raise UserError(f"export: cannot write {out} ({why}); nothing there was changed") from None
        raise
    if old is not None:  # the directory replaced: removed once the new one is in place
        try:
            shutil.rmtree(old)
        except OSError as e:
            log.warning(
                "export: the directory %s replaced is at %s: it could not be removed (%s)", out, old, e.strerror
            )
    if caveat := family.export_caveat(s):
        log.warning(caveat)
    log.info("exported %s as %s (%s) to %s", path, config["architectures"][0], family.model_type, out)
    return out


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def replace_dir(new: Path, out: Path) -> Path | None:
    """`new` renamed to `out`; an `out` that exists (empty, or to overwrite) is moved aside first, so `out` is
    at every moment either the old directory or the new one. Returns where the old one now is, for removal."""
    if not out.exists():
        os.replace(new, out)
        return None
    old = new.with_name(new.name.replace(".tmp", ".old"))
    os.replace(out, old)
    try:
        os.replace(new, out)
    except OSError:
        os.replace(old, out)
        raise
    return old


def exported(args: dict):
    if not args.get("ckpt") or not args.get("out"):
        raise UserError("usage: python -m transformer_lab export RUN_DIR_OR_CKPT OUT_DIR [overwrite=true]")
    overwrite = args.get("overwrite", False)
    check_flag("overwrite", overwrite)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    out = export(args["ckpt"], args["out"], overwrite)
    yield f"wrote {out}: AutoModel*.from_pretrained({str(out)!r}), AutoTokenizer.from_pretrained({str(out)!r})"


COMMAND = Command("export", __doc__, {"ckpt": None, "out": None, "overwrite": False}, exported, paths=("ckpt", "out"))


def main(argv: list[str] | None = None) -> None:
    run_command("export", argv)


if __name__ == "__main__":
    main()
