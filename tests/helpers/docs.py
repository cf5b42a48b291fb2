"""What the docs show: the pages that hold commands, and the files docs/extending.md writes out whole."""

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
