"""A user's own model and dataset, each one Python file and one YAML outside the repository (README: "Your
own model or dataset"), trained through train.py with no edit to src/.

Here: the page's files whole; tests/e2e/test_extension.py has the rest."""

from helpers.docs import documented_files


def test_the_page_has_a_complete_dataset_of_each_form():
    files = documented_files()
    assert {p for p in files if p.startswith("mydata/")} == {
        "mydata/charfile.py",
        "mydata/reverse.py",
        "mydata/maxof.py",
        "mydata/shouting.py",
    }
    for path, text in files.items():
        assert "..." not in text, path  # no body left out
        if path.endswith(".py"):
            compile(text, path, "exec")
