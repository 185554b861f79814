"""Which megatron-core a worker imports, read without importing it: a wheel's metadata, or a
source checkout's package_info.py with its commit (recorded in reports and corpus files)."""

import subprocess
import sys
import tempfile
import textwrap
import unittest
from pathlib import Path

from recap_drivers.frameworks.megatron.version import git_commit

SHA = "d98e8a64ddf34856e74b24714e3bedb2f5a39553"
PACKAGE_INFO = textwrap.dedent("""\
    MAJOR = 0
    MINOR = 20
    PATCH = 0
    PRE_RELEASE = 'rc1'
    import subprocess as _subprocess  # main's runs git here: it must not be executed
    """)


def tree_with_megatron(root: Path) -> None:
    (root / "megatron" / "core").mkdir(parents=True)
    (root / "megatron" / "__init__.py").write_text("")
    (root / "megatron" / "core" / "__init__.py").write_text("raise ImportError('must not be imported')\n")
    (root / "megatron" / "core" / "package_info.py").write_text(PACKAGE_INFO)


def version_seen(path: Path) -> str:
    """installed_version() in a fresh interpreter whose path starts with `path`."""
    code = "from recap_drivers.frameworks.megatron.version import installed_version as v; print(v())"
    drivers = Path(__file__).resolve().parents[1]
    env = {"PYTHONPATH": f"{path}:{drivers}", "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True).stdout.strip()


class MegatronVersion(unittest.TestCase):
    def test_source_checkout_names_its_commit(self) -> None:
        with tempfile.TemporaryDirectory() as d:
            root = Path(d)
            tree_with_megatron(root)
            (root / ".git" / "refs" / "heads").mkdir(parents=True)
            (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
            (root / ".git" / "refs" / "heads" / "main").write_text(SHA + "\n")
            self.assertEqual(version_seen(root), "0.20.0rc1+d98e8a64ddf3")

    def test_packed_ref_and_detached_head(self) -> None:
        with tempfile.TemporaryDirectory() as d:
            git = Path(d) / ".git"
            git.mkdir()
            (git / "HEAD").write_text("ref: refs/heads/main\n")
            (git / "packed-refs").write_text(f"# pack-refs with: peeled\n{SHA} refs/heads/main\n")
            self.assertEqual(git_commit(Path(d)), SHA)
            (git / "HEAD").write_text(SHA.replace("d", "e") + "\n")
            self.assertEqual(git_commit(Path(d)), SHA.replace("d", "e"))
            (git / "HEAD").write_text("ref: refs/heads/gone\n")
            self.assertIsNone(git_commit(Path(d)))

    def test_wheel_metadata_next_to_the_package(self) -> None:
        with tempfile.TemporaryDirectory() as d:
            root = Path(d)
            tree_with_megatron(root)
            info = root / "megatron_core-0.15.3.dist-info"
            info.mkdir()
            (info / "METADATA").write_text("Metadata-Version: 2.1\nName: megatron-core\nVersion: 0.15.3\n")
            self.assertEqual(version_seen(root), "0.15.3")

    def test_none_installed(self) -> None:
        with tempfile.TemporaryDirectory() as d:
            self.assertEqual(version_seen(Path(d)), "None")


if __name__ == "__main__":
    unittest.main()
