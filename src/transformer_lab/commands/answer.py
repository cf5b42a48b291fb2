"""Answer equations with a model trained on them (gpt with task=lm, encdec or t5 with task=seq2seq).

    python -m transformer_lab answer outputs/DATE/TIME text="12 + 34 ="
    python -m transformer_lab answer outputs/DATE/TIME < equations.txt > answers.txt   # an equation a line

The first argument is a run directory (its checkpoints/best.ckpt, else last.ckpt) or a checkpoint file. An
equation is written as the run's data writes it (`12+34=` too; the "=" may be left out); the answer is the
model's greedy one, as many tokens as the run's answers had (`max_len=` sets another count). With text=, an
equation the vocabulary cannot encode is refused; on standard input every line gets exactly one answer line,
an empty one (and a warning on stderr saying why) for a line the model cannot take. A bert classifier of
equations answers with `classify`.
"""

from __future__ import annotations

from transformer_lab.api.options import ANSWER as OPTIONS
from transformer_lab.api.options import with_defaults
from transformer_lab.commands.cli import Command, run_command
from transformer_lab.commands.inference import input_lines, warn
from transformer_lab.errors import keyed, require

DEFAULTS = {"ckpt": None, "text": None, **OPTIONS, "device": "cpu"}


def answered(args: dict):
    from transformer_lab.api.answer import answers, checked
    from transformer_lab.api.run import load
    from transformer_lab.batching.base import encoder

    options = checked({key: args.pop(key) for key in OPTIONS if key in args})
    args = with_defaults(args, {key: DEFAULTS[key] for key in ("ckpt", "text", "device")})
    text = args.pop("text")
    trained = load(args.pop("ckpt"), args.pop("device"), "answer")
    if text is not None:  # (one equation: one that cannot be read is the command's mistake)
        require(text.strip() != "", "text", "is empty")
        with keyed("text"):
            encoder(trained.datamodule)(text)
    yield from answers(trained.model, trained.datamodule, input_lines(text), warn=warn, **options)


COMMAND = Command("answer", __doc__, DEFAULTS, answered, text=("text", "device"))


def main(argv: list[str] | None = None) -> None:
    run_command("answer", argv)


if __name__ == "__main__":
    main()
