"""What the docs show: the pages that hold commands, the `python train.py` commands and the errors they are
shown to end with, and the files docs/extending.md writes out whole."""

import re

from helpers.runs import ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "experiments").glob("*.md"))]

# The datasets of docs/extending.md ("Your own dataset"), one of each form, copied from the page as it is written.
EXTENDING = ROOT / "docs" / "extending.md"
HEADER = re.compile(r"^# (mydata/\w+\.py|myconf/\w+/\w+\.yaml)$")


def documented_files() -> dict[str, str]:
    """Every indented block of the page that starts with `# mydata/NAME.py` or `# myconf/GROUP/NAME.yaml`,
    up to the next such line or the end of the block: path -> its text."""
    files, current = {}, None
    for line in EXTENDING.read_text().splitlines():
        if line.startswith("    ") or (not line.strip() and current is not None):
            text = line[4:]
            if HEADER.match(text):
                current = text[2:]
                files[current] = ""
            elif current is not None:
                files[current] += text + "\n"
        else:
            current = None
    return {path: text.strip("\n") + "\n" for path, text in files.items()}


TRAIN = re.compile(r"python train\.py((?: +[^\s`#\\]+)*)[ \\]*(?:#\s*error:\s*(.*)|#.*)?$")
PLACEHOLDERS = ("...", "[overrides]", "key=value", "RUN_DIR", "$", "=S)", "ckpt_path=")


def train_commands() -> list[tuple[str, str, str | None]]:
    """(doc, the overrides, the error it is shown to end with or None) of every `python train.py` command
    in the docs that a config can be composed from: not those with placeholders, a user's own configs
    ($PWD/myconf, tested in test_extension.py) or a checkpoint to resume (test_resume.py)."""
    found = []
    for doc in DOCS:
        lines = doc.read_text().splitlines()
        for i, line in enumerate(lines):
            for match in TRAIN.finditer(line.strip().strip("`$ ")):
                overrides = match.group(1).split()
                following = lines[i + 1].strip() if i + 1 < len(lines) else ""
                error = match.group(2) or (following[len("error: ") :] if following.startswith("error: ") else None)
                if overrides and not any(p in o for o in overrides for p in PLACEHOLDERS):
                    found.append((doc.name, " ".join(overrides), error))
    return sorted(set(found))


ERROR = re.compile(r"error: (.+)")


def documented_errors() -> list[tuple[str, str]]:
    """(doc, text) of every `error: ...` line or inline span the docs show (an inline one may run over lines)."""
    found = []
    for doc in DOCS:
        lines = doc.read_text().splitlines()
        for i, line in enumerate(lines):
            for match in ERROR.finditer(line):
                text = match.group(1)
                if line[: match.start()].count("`") % 2:  # inside `...`: up to its closing backtick
                    rest = iter(lines[i + 1 :])
                    while "`" not in text:
                        text += " " + next(rest).strip()
                    text = text.split("`")[0]
                found.append((doc.name, text.strip()))
    return found
