"""A checkpoint against the run that takes it up: what a resume or an evaluation must share with the run that
wrote it (the model's settings but CHANGEABLE_KEYS, its tensors' shapes, the data's vocabulary and files), what
a resume may change (CHANGEABLE_ON_RESUME). Each refusal is one line naming the key (docs/runs.md)."""

from __future__ import annotations

import logging
from pathlib import Path

from omegaconf import DictConfig, OmegaConf, open_dict

from transformer_lab.config.schema import SETTINGS
from transformer_lab.errors import ConfigError

log = logging.getLogger(__name__)

# Model keys a resumed run may change; every other one decides the architecture.
CHANGEABLE_KEYS = ("dropout", "compile")


def changed_settings(saved_config: dict, cfg: DictConfig, sections: tuple[str, ...] = ("model", "data")) -> dict:
    """{key: (the checkpoint's run's value, this run's)} for every setting of `sections` that differs."""
    ours = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    return {k: v for k, v in differences(flat(saved_config), flat(ours)).items() if k.split(".")[0] in sections}


def differences(old: dict, new: dict) -> dict[str, tuple]:
    """{key: (old's value, new's)} for every key of two flat dicts whose values differ (a key in one only, too)."""
    return {key: (old.get(key), new.get(key)) for key in sorted(set(old) | set(new)) if old.get(key) != new.get(key)}


def _listed(changed: dict) -> str:
    return ", ".join(f"{key}={new} (the checkpoint's: {old})" for key, (old, new) in changed.items())


def check_compatible(saved_config: dict, cfg: DictConfig, path: str) -> None:
    """A run resumes only a checkpoint of the same architecture on the same data: every model setting
    that differs is named at once (those a resumed run may change, CHANGEABLE_KEYS, aside; another data option
    is refused before, as the resume composes its config: run/resume.py)."""
    changed = {
        key: values
        for key, values in changed_settings(saved_config, cfg, ("model",)).items()
        if key.removeprefix("model.") not in CHANGEABLE_KEYS
    }
    if changed:
        raise ConfigError(
            "ckpt_path",
            f"{path} holds another model than this run's: {_listed(changed)}. Resume "
            "without changing them (a resumed run starts from its checkpoint's settings)",
        )


def misfits(path: str | Path, saved: dict, ours: dict, changed: dict | None = None, prefix: str = "") -> str | None:
    """The one message for a checkpoint whose tensors do not fit the model as its code builds it now (a model
    class of the user's own changed since, or a setting that decides a shape): every tensor missing from the
    checkpoint, every one unexpected in it, every shape that differs (both shapes), the `changed` settings
    ({key: (the checkpoint's run's value, now)}), and what works instead. None where everything fits.
    `saved`, `ours`: {name: shape}; `prefix` (the task's `model.`) is left out of the names shown."""
    missing = sorted(key.removeprefix(prefix) for key in set(ours) - set(saved))
    unexpected = sorted(key.removeprefix(prefix) for key in set(saved) - set(ours))
    shapes = sorted(
        f"{key.removeprefix(prefix)} {list(saved[key])} in the checkpoint, {list(shape)} in the model"
        for key, shape in ours.items()
        if key in saved and tuple(saved[key]) != tuple(shape)
    )
    if not (missing or unexpected or shapes):
        return None
    parts = [
        f"{what} ({len(names)}): {', '.join(names)}"
        for what, names in (
            ("missing from the checkpoint", missing),
            ("unexpected in it", unexpected),
            ("of other shapes", shapes),
        )
        if names
    ]
    settings = f"; settings that differ from the checkpoint's run: {_listed(changed)}" if changed else ""
    instead = "Change those settings back" if changed else "Restore the model code it was written with"
    return (
        f"{path} holds tensors that do not fit the model as its code builds it now: {'; '.join(parts)}{settings}. "
        f"{instead}, or start a new run from its weights with init_from={path} (the tensors that fit are loaded, "
        "the others initialised)"
    )


def shapes_of(state: dict) -> dict:
    """{name: shape} of a state dict."""
    return {key: tuple(value.shape) for key, value in state.items()}


def check_state_fits(path: str, saved_shapes: dict, saved_config: dict, cfg: DictConfig, task) -> None:
    """Resuming restores every tensor and the optimizer's state parameter by parameter, evaluating every
    tensor: the checkpoint must hold exactly this model's tensors, of the same shapes. Checked here, before
    Lightning loads anything, so a mismatch is one message naming every tensor and setting involved (the
    message every command loading a checkpoint gives: `misfits`), not a size-mismatch traceback."""
    message = misfits(path, saved_shapes, shapes_of(task.state_dict()), changed_settings(saved_config, cfg), "model.")
    if message:
        raise ConfigError("ckpt_path", message)


def check_same_data(path: str, saved_meta: dict, datamodule, files_checked: bool = False) -> None:
    """A run resumes only on the data its checkpoint was trained on: the same file contents (their SHA-256,
    wherever the files are now; `files_checked`: before the data was set up, check_same_files) and the same
    vocabulary, so every token id means what it meant and the splits are the same. (Checkpoints from before
    data_files was recorded are checked by vocabulary only.)"""
    if not files_checked:
        check_same_files(path, saved_meta, datamodule.data.data_files())
    for key, value in datamodule.data.checkpoint_meta().items():
        if saved_meta.get(key) != value:
            raise ConfigError(
                "ckpt_path",
                f"{path} holds another vocabulary ({key}) than this run's data gives: its token ids would "
                "mean other pieces. Resume without changing the data.* settings, or start a new run with init_from",
            )


def check_same_files(path: str, saved_meta: dict, now: dict) -> None:
    """The data files' SHA-256 now (`now`: data_files()) against what the checkpoint's run read; called before
    the data is set up where the dataset can name its files then (nothing is encoded from changed files)."""
    saved = saved_meta.get("data_files")
    if saved and sorted(saved.values()) != sorted(now.values()):  # (a recorded {}: files not known then)
        changed = [f"{name} (SHA-256 {digest[:12]}…)" for name, digest in now.items() if digest not in saved.values()]
        raise ConfigError(
            "ckpt_path",
            f"{path} was trained on other data than this run reads: {', '.join(changed)} is not what it read (a "
            "file changed since, or another file: the checkpoint records its files' SHA-256); resuming would read "
            "other splits with another vocabulary. "
            "Restore the data, or start a new run from its weights with init_from",
        )


# What a resume may change, as keys or the sections (and prefixes) they lie in: how long and on what it trains,
# what it logs and watches, where its files are: never what it learns from or how (docs/runs.md). The model's
# settings are check_compatible's (its CHANGEABLE_KEYS).
CHANGEABLE_ON_RESUME = (
    "ckpt_path",
    "trainer",
    "logger",
    "callbacks",
    "paths",
    "attention_kernel",
    "objective",
    "optim.decay_steps",  # a longer schedule than the run's, chosen (else it keeps the run's horizon)
    "data.path",  # the same files elsewhere (their SHA-256 is checked: check_same_data)
    "data.cache_dir",
    "data.num_workers",
    "data.val_batch_size",
    "task.sample",  # what validation generates to show, not what trains
    "task.decode",
    *(f"model.{key}" for key in CHANGEABLE_KEYS),  # (the model's other keys are its architecture: check_compatible)
)


_HOW_IT_STARTED = ("init_from", "init_strict", "overwrite", "model_sizes")  # (validate refuses them with ckpt_path)


def _changeable(key: str) -> bool:
    return key.startswith("model.") or any(key == c or key.startswith(c + ".") for c in CHANGEABLE_ON_RESUME)


def shown(value) -> str:
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def check_changeable(changes: dict[str, tuple], path: str, typed: list[str] = ()) -> None:
    """The command line's changes of a resume, each among CHANGEABLE_ON_RESUME, or refused naming the key (one the
    command line gave before one that follows from it: `seed` before data.seed's ${seed})."""
    for key in sorted(changes, key=lambda k: k not in typed):
        trained, given = changes[key]
        if not _changeable(key) and key not in _HOW_IT_STARTED:
            raise ConfigError(
                key,
                f"{path} was trained with {key}={shown(trained)}, and a resume continues it as it was trained (it may "
                f"change only {', '.join(CHANGEABLE_ON_RESUME)}: docs/runs.md); resume without {key}={shown(given)}, "
                f"or start a new run from its weights with init_from={path}",
            )


def check_resume(path: str, saved_config: dict, cfg: DictConfig, changes: dict[str, tuple], typed: list[str]) -> None:
    """A resume's config against the checkpoint at `path`, whose run was trained with `saved_config`: the
    model's settings and the data's kept (check_compatible), and every change of the command line (`changes`;
    `typed`: the keys it gave) among CHANGEABLE_ON_RESUME (the optimizer's settings are not: its state steps with
    them)."""
    check_compatible(saved_config, cfg, path)
    if cfg.trainer.get("fast_dev_run"):  # (Lightning's smoke test starts at epoch 0 and stops after one)
        raise ConfigError(
            "trainer.fast_dev_run",
            f"debug=fast runs a few batches of a new run and cannot continue {path}: resume without debug=fast, or "
            "smoke-test a new run in another hydra.run.dir",
        )
    check_changeable(changes, path, typed)


def flat(section: dict, prefix: str = "") -> dict:
    """{dotted.key: value} of a nested dict's leaves."""
    out = {}
    for key, value in section.items():
        if isinstance(value, dict):
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


_STARTED = ("ckpt_path", "init_from", "init_strict", "overwrite")  # how the run was started, not what it trained


def changed_leaves(before: DictConfig, after: DictConfig) -> dict[str, tuple]:
    """{key: (before's value, after's)} for every resolved value that differs (a key in one only, too)."""
    resolved = lambda cfg: flat(OmegaConf.to_container(cfg, resolve=True, enum_to_str=True, throw_on_missing=False))  # noqa: E731
    return differences(resolved(before), resolved(after))


def as_trained(cfg: DictConfig, trained: dict, changes: dict[str, tuple]) -> DictConfig:
    """`cfg` (today's composition of the run's overrides and this command's: a resume's, evaluate's) with every
    value the checkpoint's run resolved put back, but those this command changes and where the run's files are (paths, and values that
    differ only by them: a checkpoint resumed into another directory writes there). What an edited YAML file
    would change of a trained run is logged, and not changed. The schedule keeps the run's horizon."""
    was = trained.get("paths") or {}
    now = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True, throw_on_missing=False)
    moved = [
        (str(was[k]), str(now["paths"][k]))
        for k in ("output_dir", "root_dir")
        if was.get(k) and (now.get("paths") or {}).get(k) and was[k] != now["paths"][k]
    ]
    current, saved = flat(now), flat(trained)
    # A user's own model, data or task section has no schema: it is the trained one, key for key (a key the
    # YAML has added since is dropped, one it has lost comes back); ours keep the keys their schema has now.
    own = [s for s in ("model", "data", "task") if (trained.get(s) or {}).get("_target_") not in (None, *SETTINGS)]
    kept = []
    for key in [k for k in current if k.split(".")[0] in own and k not in saved and k not in changes]:
        parent, _, name = key.rpartition(".")
        with open_dict(cfg):
            del OmegaConf.select(cfg, parent)[name]
        kept.append(f"no {key} (the files now say {shown(current[key])})")
    for key, value in saved.items():
        if key not in current and key.split(".")[0] in own:
            OmegaConf.update(cfg, key, value, force_add=True)
            kept.append(f"{key}={shown(value)} (the files now leave it out)")
            continue
        if key not in current or current[key] == value or key in changes:
            continue
        if key.startswith("paths.") or key in _STARTED:
            continue
        if isinstance(value, str) and isinstance(current[key], str):
            relocated = value
            for old, new in moved:
                relocated = relocated.replace(old, new)
            if relocated == current[key]:
                continue
        OmegaConf.update(cfg, key, value, force_add=True)
        if not (key == "optim.decay_steps" and current[key] is None):  # (the horizon a resume recorded: below)
            kept.append(f"{key}={shown(value)} (the files now say {shown(current[key])})")
    if kept:
        log.info("the run continues as it was trained: %s", ", ".join(kept))
    horizon = (trained.get("trainer") or {}).get("max_steps")
    if (
        "optim.decay_steps" not in changes
        and cfg.optim.get("decay_steps", "absent") is None
        and isinstance(horizon, int)
        and horizon > 0
    ):
        OmegaConf.update(cfg, "optim.decay_steps", horizon)  # (null meant the run's trainer.max_steps: kept)
    return cfg


def resumed_config(
    trained: DictConfig, given: DictConfig, saved_config: dict, path: str, typed: list[str]
) -> DictConfig:
    """The config a resume runs: `given` (the run's recorded overrides with this command's, composed now) with
    every value the checkpoint's run resolved (`saved_config`) put back but those this command changes, which
    are found against `trained` (the run's overrides alone, composed now: so a YAML edited since cancels out)
    and each checked (check_resume; `typed`: the keys the command line gave)."""
    changes = changed_leaves(trained, given)
    cfg = as_trained(given, saved_config, changes)
    check_resume(path, saved_config, cfg, changes, typed)
    return cfg
