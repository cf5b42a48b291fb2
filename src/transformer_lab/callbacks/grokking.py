"""Grokking's progress measures (Nanda et al. 2023, "Progress measures for grokking via mechanistic
interpretability", section 5.1), for a decoder trained on (a + b) mod p: `callbacks=[default,progress]`.

At each validation (or every `every_n_steps`) it computes, over all p² equations:

- the Fourier spectrum of the token embedding over the p residues: the power of each frequency k = 1 .. (p-1)/2,
  the norm² of the embedding's cos(2πka/p) and sin(2πka/p) components, as a share of all the frequencies' power
  (the constant component, the residues' mean embedding, left out: the shares add up to 1);
- the key frequencies: the fewest that hold `key_share` of that power (the trained model of the paper uses five);
- the excluded loss: the loss on the training set of the answer logits with their components along cos(w_k(a+b))
  and sin(w_k(a+b)) removed, for each key frequency k (w_k = 2πk/p): it rises as the model comes to rely on them;
- the restricted loss: the loss on the training set of those components alone (with the logits' mean over inputs
  added back, the paper's bias correction): it falls once the key frequencies alone do the task.

The losses are cross-entropies over the p answers' logits alone (the paper's too; the run's train/loss is over the
whole vocabulary, so at initialisation these start near ln p, below it). Logged at each validation as
`progress/key_frequencies`, `progress/excluded_loss`, `progress/restricted_loss` and `progress/embed_freq_K`
(every frequency's share) to metrics.jsonl and every logger; with `images: true` the spectrum is also a W&B image
each time (without W&B, a PNG in the run's progress/). One difference from the paper: it took the key frequencies of the final
model for every checkpoint; here each measure uses the model's key frequencies of that moment, and `frequencies`
fixes them (e.g. to a finished run's, to remeasure the way the paper did).
"""

from __future__ import annotations

import math
from pathlib import Path

import lightning as L
import torch
import torch.nn.functional as F

from transformer_lab.choices import check_flag, check_number
from transformer_lab.errors import require


def fourier_basis(p: int) -> torch.Tensor:
    """(p, p) orthonormal rows over the residues 0..p-1 (p odd): the constant, then cos and sin of each frequency
    k = 1 .. (p-1)/2 in turn (row 2k-1: cos(2πka/p), row 2k: sin)."""
    a = torch.arange(p, dtype=torch.float64)
    rows = [torch.ones(p, dtype=torch.float64)]
    for k in range(1, (p - 1) // 2 + 1):
        rows += [torch.cos(2 * math.pi * k * a / p), torch.sin(2 * math.pi * k * a / p)]
    basis = torch.stack(rows)
    return basis / basis.norm(dim=1, keepdim=True)


def embedding_spectrum(embedding: torch.Tensor) -> torch.Tensor:
    """(p, d) embedding of the residues -> ((p-1)/2,) each frequency's share of the power of the embedding's
    frequencies (the constant, the residues' mean embedding, left out: the shares add up to 1)."""
    p = embedding.size(0)
    power = (fourier_basis(p) @ embedding.double()).pow(2).sum(-1)  # (p,) per basis row
    frequencies = power[1::2] + power[2::2]  # cos and sin of each frequency together
    return frequencies / frequencies.sum()


def key_frequencies(spectrum: torch.Tensor, share: float) -> list[int]:
    """The fewest frequencies (1-based) whose shares add up to `share` (of 1)."""
    kept, held = [], 0.0
    for i in spectrum.argsort(descending=True).tolist():
        kept.append(i + 1)
        held += float(spectrum[i])
        if held >= share * (1 - 1e-9):
            break
    return sorted(kept)


def sum_directions(p: int, frequencies: list[int]) -> torch.Tensor:
    """(2 n, p²) orthonormal: cos(w_k(a+b)) and sin(w_k(a+b)) over the grid of inputs a * p + b, each k."""
    a = torch.arange(p, dtype=torch.float64)
    total = (a[:, None] + a[None, :]).flatten()  # (p²,) a + b
    rows = []
    for k in frequencies:
        rows += [torch.cos(2 * math.pi * k * total / p), torch.sin(2 * math.pi * k * total / p)]
    directions = torch.stack(rows)
    return directions / directions.norm(dim=1, keepdim=True)


def excluded_and_restricted(
    logits: torch.Tensor, answers: torch.Tensor, train: torch.Tensor, frequencies: list[int]
) -> tuple[float, float]:
    """Nanda et al.'s excluded and restricted losses on the training set. logits: (p², p) answer logits of the
    inputs a * p + b; answers: (p²,); train: indices into the grid."""
    p = logits.size(1)
    u = sum_directions(p, frequencies)  # (2n, p²)
    logits = logits.double()
    components = u.T @ (u @ logits)  # (p², p) the logits along the key directions (of the inputs)
    excluded = logits - components
    restricted = components + (logits - components).mean(dim=0, keepdim=True)  # + the per-answer offset
    return tuple(float(F.cross_entropy(z[train], answers[train])) for z in (excluded, restricted))  # type: ignore


class GrokkingProgress(L.Callback):
    """The measures above for `model`'s run on `data` (set from the config: refused here, before a run starts,
    unless the data is modular addition of two terms and the model a decoder)."""

    def __init__(
        self,
        data: str,
        model: str,
        run_dir: str,
        p: int | None = None,
        op: str | None = None,
        terms: int | None = None,
        key_share: float = 0.9,
        frequencies: list[int] | None = None,
        images: bool = False,
    ):
        from transformer_lab.config.classes import import_class

        op = None if op is None else str(op)  # (the config's choice)
        if p is None or op != "+" or terms != 2:
            got = f"data={data}" if p is None else f"data.op={op!r}, data.terms={terms}"
            raise ValueError(
                f"measures the Fourier circuit of (a + b) mod p: needs data=modular data.op=+ data.terms=2, got {got}"
            )
        if p < 3:
            raise ValueError(f"needs a frequency to measure, 1..(p-1)/2: data.p >= 3, got {p}")
        architecture = getattr(import_class(model, "model"), "architecture", None)
        if architecture != "decoder":
            raise ValueError(f"reads a decoder's logits at '=' (model=gpt); {model} is an {architecture!r} model")
        check_number("key_share", key_share, False, "(0, 1]")
        if frequencies is not None:
            top = (p - 1) // 2
            listed = list(frequencies) if not isinstance(frequencies, (str, int, float)) else None
            bad = [k for k in listed or [] if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= top]
            ok = listed and not bad and len(set(listed)) == len(listed)
            require(
                ok,
                "frequencies",
                f"must be a list of distinct integers in 1..{top} (p={p}), or null, got {frequencies!r}",
            )
        check_flag("images", images)
        self.p, self.key_share, self.images = p, key_share, images
        self.dirpath = Path(run_dir) / "progress"  # (the run's own folder)
        self.frequencies = sorted(frequencies) if frequencies is not None else None

    def check(self, model: torch.nn.Module, datamodule) -> None:
        """Run before the run's directory is claimed (prepare.build_run): the inputs and the embedding it
        measures, found on the model and data the run will train."""
        self.prepare(datamodule, model)

    def setup(self, trainer, pl_module, stage: str) -> None:
        self.prepare(trainer.datamodule, pl_module.model)

    def prepare(self, datamodule, model: torch.nn.Module) -> None:
        """The p² inputs in grid order (a * p + b) as the model reads them (the batches' encode()), their answers,
        the training set's places among them, the residues' ids, and the model's token embedding."""
        equations = datamodule.data.equations()
        a, b = equations.tokens[:, 0], equations.tokens[:, 2]
        grid = a * self.p + b  # each equation's place among the p² inputs
        pairs = [(x, y) for x in range(self.p) for y in range(self.p)]
        self.inputs = torch.tensor([datamodule.encode(f"{x} + {y} =") for x, y in pairs])  # (p², T)
        self.answers = torch.tensor([(x + y) % self.p for x, y in pairs])
        self.train = grid[equations.train]
        self.residues = torch.tensor([datamodule.encode(f"{r} + 0 =")[0] for r in range(self.p)])  # their ids
        vocab = datamodule.vocab_size
        self.embedding = next(
            (m for m in model.modules() if isinstance(m, torch.nn.Embedding) and m.num_embeddings == vocab), None
        )
        if self.embedding is None:
            raise ValueError(f"{type(model).__name__} has no nn.Embedding of the vocabulary's {vocab} tokens")

    @torch.no_grad()
    def measure(self, model: torch.nn.Module) -> dict:
        """The measures of the model as it is now."""
        residues = self.embedding.weight[self.residues.to(self.embedding.weight.device)]  # (p, d)
        spectrum = embedding_spectrum(residues.detach().float().cpu())
        key = self.frequencies or key_frequencies(spectrum, self.key_share)
        device = self.embedding.weight.device
        logits = torch.cat([model(chunk.to(device))[:, -1].float().cpu() for chunk in self.inputs.split(4096)])
        logits = logits[:, self.residues]  # (p², p): the answers' logits
        excluded, restricted = excluded_and_restricted(logits, self.answers, self.train, key)
        return {"spectrum": spectrum, "key": key, "excluded": excluded, "restricted": restricted}

    def on_validation_epoch_end(self, trainer, pl_module) -> None:
        if trainer.sanity_checking:
            return
        was_training = pl_module.model.training
        pl_module.model.eval()
        m = self.measure(pl_module.model)
        pl_module.model.train(was_training)
        values = {
            "progress/key_frequencies": float(len(m["key"])),
            "progress/excluded_loss": m["excluded"],
            "progress/restricted_loss": m["restricted"],
            **{f"progress/embed_freq_{k}": float(s) for k, s in enumerate(m["spectrum"].tolist(), 1)},
        }
        for name, value in values.items():
            pl_module.log(name, value, rank_zero_only=True)
        if self.images and trainer.is_global_zero:
            self.log_image(trainer, m)

    def log_image(self, trainer, m: dict) -> None:
        """The spectrum as a W&B image; without W&B, a PNG in the run's progress/ folder."""
        image = spectrum_image(m["spectrum"], m["key"], f"step {trainer.global_step}")
        wandb = [logger for logger in trainer.loggers if hasattr(logger, "log_image")]
        for logger in wandb:
            logger.log_image("progress/embedding_spectrum", [image], step=trainer.global_step)
        if not wandb:
            from PIL import Image

            from transformer_lab.store.atomic import atomic_path

            with atomic_path(self.dirpath / f"spectrum_step_{trainer.global_step}.png") as tmp:
                Image.fromarray(image).save(tmp, format="PNG")


def spectrum_image(spectrum: torch.Tensor, key: list[int], title: str):
    """The spectrum as a bar chart, the key frequencies marked: an (H, W, 4) uint8 image."""
    import matplotlib

    matplotlib.use("Agg")
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 2.6))
    ax = fig.add_subplot()
    k = range(1, len(spectrum) + 1)
    ax.bar(k, spectrum.tolist(), color=["C3" if f in key else "C0" for f in k], width=0.8)
    ax.set(xlabel="frequency k", ylabel="share of the embedding's power", title=f"{title}: key {key}")
    fig.tight_layout()
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba()).copy()
