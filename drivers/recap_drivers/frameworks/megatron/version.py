"""Which megatron-core a worker imports, without importing it (seconds) or running git: an
installed wheel's metadata version, or for a source checkout (a tree with .git, as carried to the
GPU machine) the version in megatron/core/package_info.py with the checkout's commit as its local
part, "0.20.0+d98e8a64ddf3", so reports and corpus files name the commit that ran."""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path
from typing import Mapping, Optional, Tuple

COMMIT_HEX = 12  # of the 40: unique in Megatron-LM's history, short enough for a table column


def _package_dir() -> Optional[Path]:
    spec = importlib.util.find_spec("megatron")
    if spec is None or not spec.submodule_search_locations:
        return None
    for loc in spec.submodule_search_locations:
        if (Path(loc) / "core" / "package_info.py").is_file():
            return Path(loc)
    return None


def _source_version(info: Path) -> str:
    """MAJOR.MINOR.PATCH + PRE_RELEASE as package_info.py assigns them (read, not executed:
    main's package_info runs git to append its own short hash)."""
    text = info.read_text()
    parts = {}
    for key in ("MAJOR", "MINOR", "PATCH", "PRE_RELEASE"):
        m = re.search(rf"^{key}\s*=\s*['\"]?([0-9A-Za-z.]*)['\"]?\s*$", text, re.MULTILINE)
        parts[key] = m.group(1) if m else ""
    if not (parts["MAJOR"] and parts["MINOR"] and parts["PATCH"]):
        raise ValueError(f"{info}: no MAJOR, MINOR and PATCH assignments")
    return f"{parts['MAJOR']}.{parts['MINOR']}.{parts['PATCH']}{parts['PRE_RELEASE']}"


def git_commit(tree: Path) -> Optional[str]:
    """The commit HEAD names in tree/.git: a detached hash, a loose ref, or packed-refs."""
    git = tree / ".git"
    if git.is_file():  # a worktree: "gitdir: PATH"
        line = git.read_text().strip()
        if not line.startswith("gitdir:"):
            return None
        git = (tree / line[len("gitdir:"):].strip()).resolve()
    head_file = git / "HEAD"
    if not head_file.is_file():
        return None
    head = head_file.read_text().strip()
    if not head.startswith("ref:"):
        return head if re.fullmatch(r"[0-9a-f]{40}", head) else None
    ref = head[len("ref:"):].strip()
    bases = [git]  # a worktree keeps its refs in the common directory
    if (git / "commondir").is_file():
        bases.append((git / (git / "commondir").read_text().strip()).resolve())
    for base in bases:
        loose = base / ref
        if loose.is_file():
            sha = loose.read_text().strip()
            return sha if re.fullmatch(r"[0-9a-f]{40}", sha) else None
        packed = base / "packed-refs"
        if packed.is_file():
            for line in packed.read_text().splitlines():
                sha, _, name = line.partition(" ")
                if name == ref and re.fullmatch(r"[0-9a-f]{40}", sha):
                    return sha
    return None


def installed_version() -> Optional[str]:
    """megatron-core's version as the worker will import it; None when there is none."""
    pkg = _package_dir()
    if pkg is None:
        return None
    tree = pkg.parent
    commit = git_commit(tree) if (tree / ".git").exists() else None
    if commit is not None:
        return f"{_source_version(pkg / 'core' / 'package_info.py')}+{commit[:COMMIT_HEX]}"
    # the metadata next to the package that is imported, not whichever is first on sys.path
    from importlib.metadata import distributions

    for dist in distributions(path=[str(tree)]):
        if (dist.metadata["Name"] or "").lower().replace("_", "-") == "megatron-core":
            return str(dist.version)
    return _source_version(pkg / "core" / "package_info.py")  # a tree without .git or metadata


# The graph-safe recompute option (graph_safe_recompute.py), read here without importing torch so
# that a worker refuses a bad value before anything starts.
RECOMPUTE_ENV = "RECAP_MEGATRON_RECOMPUTE"
RECOMPUTE_CHOICES = ("graph-safe",)


def recompute_requested(environ: Optional[Mapping[str, str]] = None) -> Tuple[str, str]:
    """(choice, problem): the recompute option the worker was started with ("" when unset)."""
    v = (os.environ if environ is None else environ).get(RECOMPUTE_ENV, "")
    if v and v not in RECOMPUTE_CHOICES:
        return "", f"{RECOMPUTE_ENV}={v!r}: unknown; known: {', '.join(RECOMPUTE_CHOICES)}"
    return v, ""
