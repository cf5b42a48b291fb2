"""Every error the docs show is the code's own. A `python train.py` command shown with its error is run as
written and must print it (tests/e2e/test_documented_errors.py). Every other documented error (one that needs
a run, a second process or a user's code to happen) is listed here with a fragment that a named test asserts
of the code's message: a message changed in the code fails that test, and once the test is changed, the
docs' copy fails here until it is changed too."""

from helpers.docs import documented_errors, train_commands
from helpers.runs import ROOT

# doc -> (a fragment of its error as the docs show it, the test asserting that fragment of the code's message)
ASSERTED_ELSEWHERE = [
    ("distributed.md", "ended without a result (state: CANCELLED); its logs:", "e2e/test_slurm.py"),
    ("extending.md", "model.n_embd: must be even", "e2e/test_extension.py"),
    ("extending.md", "n_layer: must be an integer >= 1, got 0", "unit/test_config.py"),
    ("extending.md", "its run imported", "e2e/test_extension.py"),
    ("extending.md", "lacks what task=lm calls on it with", "unit/test_config.py"),
    ("extending.md", "task.gamma: must be >= 0, got -1", "e2e/test_extension.py"),
    ("inference.md", "cannot use: python -m transformer_lab", "unit/test_inference.py"),
    ("inference.md", ": not a number in 0..", "unit/test_answer.py"),
    ("runs.md", "another process (pid", "e2e/test_resume.py"),
    ("runs.md", "was trained on other data than this run reads:", "e2e/test_resume.py"),
    ("runs.md", "is not what it read (a file changed since, or another file", "e2e/test_resume.py"),
    ("runs.md", "holds another model than this run's: model.n_embd=", "e2e/test_bad_inputs.py"),
    ("runs.md", "was trained with seed=1337, and a resume continues it", "e2e/test_bad_inputs.py"),
]


def test_every_documented_error_is_checked_against_the_code():
    run_as_written = {(doc, error.rstrip(". ")) for doc, _, error in train_commands() if error}
    unchecked = []
    for doc, text in documented_errors():
        if any(doc == d and text.startswith(error) for d, error in run_as_written):
            continue
        if not any(doc == d and fragment in text for d, fragment, _ in ASSERTED_ELSEWHERE):
            unchecked.append(f"{doc}: {text}")
    assert not unchecked, "documented errors nothing checks (run them, or list them here): " + "; ".join(unchecked)


def test_each_listed_fragment_is_in_its_doc_and_asserted_by_its_test():
    shown = documented_errors()
    for doc, fragment, test in ASSERTED_ELSEWHERE:
        assert any(d == doc and fragment in text for d, text in shown), f"{doc} no longer shows {fragment!r}"
        assert fragment in (ROOT / "tests" / test).read_text(), f"tests/{test} no longer asserts {fragment!r}"
