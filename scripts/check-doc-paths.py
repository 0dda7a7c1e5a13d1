#!/usr/bin/env python3
"""Fails when README.md or docs/ name a file of this repository that is not there.

The docs say where a thing lives (`analyzer/src/stages/symbolize.rs`), and
files move as modules split: five such paths had gone stale unnoticed. Checked:
every backticked path that starts at one of the repository's top-level
directories, and every relative Markdown link. Paths inside a crate's own
context (`verdict/tests.rs`) and other projects' (rmcp's `src/...`) are not
checked; docs/plans/ is history and keeps the paths of its day.

Run from the repository (cargo xtask test runs it).
"""
import glob
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TICKED = re.compile(r"`([A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.*-]+)+/?)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def main() -> int:
    os.chdir(ROOT)
    # The repository's own top-level directories (not `target/`, nor the
    # `report/` a local `leakscope report` leaves behind).
    tracked = subprocess.run(
        ["git", "ls-files"], capture_output=True, text=True, check=True
    ).stdout.split()
    top = {path.split("/")[0] for path in tracked if "/" in path}
    docs = ["README.md"] + sorted(glob.glob("docs/*.md")) + sorted(glob.glob("*/README.md"))
    docs += sorted(glob.glob("fixtures/recordings/README.md"))
    missing = []
    for doc in docs:
        text = open(doc, encoding="utf-8").read()
        for number, line in enumerate(text.splitlines(), 1):
            for path in TICKED.findall(line):
                if path.split("/")[0] not in top or "*" in path:
                    continue
                if not os.path.exists(path):
                    missing.append(f"{doc}:{number}: `{path}`")
            for link in LINK.findall(line):
                if re.match(r"^[a-z]+:", link) or link.startswith("#"):
                    continue
                path = os.path.normpath(os.path.join(os.path.dirname(doc), link.split("#")[0]))
                if not os.path.exists(path):
                    missing.append(f"{doc}:{number}: link {link}")
    for entry in missing:
        print(f"no such file: {entry}", file=sys.stderr)
    if missing:
        return 1
    print(f"doc paths: {len(docs)} files checked, every named file is here")
    return 0


if __name__ == "__main__":
    sys.exit(main())
