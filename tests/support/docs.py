"""The documentation pages and their fenced blocks, for the tests that read or run them."""

import pathlib
import re

REPO = pathlib.Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
BLOCK = re.compile(r"(?:<!-- needs: (\w+) -->\n)?```(\w+)\n(.*?)```", re.S)


def blocks(page, language):
    """(needs, code) of each block of `page` in `language`."""
    return [(needs, code) for needs, lang, code in BLOCK.findall(page.read_text()) if lang == language]
