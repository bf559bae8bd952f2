"""scripts/pack-wheel, the packer of memscope's wheel, checked against what pip and PEP 427/600 expect.

The suite packs the wheel from the binary its `cargo test` built, installs it in a new virtualenv
and runs it (scripts/test, server/tests/it/wheel.rs); these tests pin what installing does not
show: every RECORD digest and size, the manylinux tag against binutils' own reading of the ELF,
the metadata against pyproject.toml, refusals, and that packing twice gives the same bytes.

Run: python3 -m unittest tests/packaging/test_pack_wheel.py
(MEMSCOPE_RELEASE_BIN names a built memscope to check as well; the suite passes target/release's.)
"""

import base64
import hashlib
import importlib.machinery
import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
import tomllib
import unittest
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_loader = importlib.machinery.SourceFileLoader("pack_wheel", str(ROOT / "scripts" / "pack-wheel"))
_spec = importlib.util.spec_from_loader("pack_wheel", _loader)
pack_wheel = importlib.util.module_from_spec(_spec)
_loader.exec_module(pack_wheel)


def elf_binaries():
    """System executables (some needing libraries manylinux lacks) and the memscope the suite
    built, when named."""
    names = ("true", "ls", "python3", "strip")
    found = [Path(shutil.which(name)).resolve() for name in names if shutil.which(name)]
    built = os.environ.get("MEMSCOPE_RELEASE_BIN")
    if built:
        found.append(Path(built))
    return found


def readelf(flag: str, path: Path) -> str:
    """binutils' reading of the ELF, independent of the packer's parser."""
    return subprocess.run(["readelf", flag, "-W", str(path)], capture_output=True, text=True, check=True).stdout


@unittest.skipIf(shutil.which("readelf") is None, "readelf (binutils) is not installed")
class PlatformTag(unittest.TestCase):
    def test_the_glibc_version_is_the_highest_readelf_lists(self):
        for path in elf_binaries():
            with self.subTest(binary=str(path)):
                listed = re.findall(r"Name: GLIBC_(\d+)\.(\d+)", readelf("-V", path))
                _arch, _needed, versions = pack_wheel.elf_requirements(path.read_bytes())
                self.assertEqual(pack_wheel.highest_glibc(versions), max((int(a), int(b)) for a, b in listed))

    def test_a_binary_is_tagged_only_if_it_needs_no_library_manylinux_lacks(self):
        for path in elf_binaries():
            with self.subTest(binary=str(path)):
                needed = set(re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", readelf("-d", path)))
                foreign = sorted(needed - pack_wheel.MANYLINUX_LIBS)
                if foreign:
                    with self.assertRaisesRegex(pack_wheel.PackError, re.escape(", ".join(foreign))):
                        pack_wheel.platform_tag(path.read_bytes())
                else:
                    self.assertRegex(pack_wheel.platform_tag(path.read_bytes()), r"^manylinux_2_\d+_x86_64$")

    def test_a_file_that_is_not_an_elf_executable_is_refused(self):
        for data in (b"#!/bin/sh\necho memscope\n", b"\x7fELF\x01\x01" + bytes(64)):
            with self.assertRaisesRegex(pack_wheel.PackError, "not a 64-bit little-endian ELF"):
                pack_wheel.platform_tag(data)


class Wheel(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.scratch = tempfile.TemporaryDirectory()
        cls.binary = Path(os.environ.get("MEMSCOPE_RELEASE_BIN") or Path(shutil.which("true")).resolve())
        cls.wheel = pack_wheel.pack(cls.binary, Path(cls.scratch.name) / "one")
        cls.archive = zipfile.ZipFile(cls.wheel)
        cls.pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
        cls.version = tomllib.loads((ROOT / "Cargo.toml").read_text())["workspace"]["package"]["version"]

    @classmethod
    def tearDownClass(cls):
        cls.archive.close()
        cls.scratch.cleanup()

    def dist_info(self, name):
        return self.archive.read(f"memscope_gpu-{self.version}.dist-info/{name}").decode()

    def test_every_file_is_in_record_with_its_sha256_and_size(self):
        rows = [line.split(",") for line in self.dist_info("RECORD").splitlines()]
        listed = {path: (digest, size) for path, digest, size in rows}
        self.assertEqual(set(listed), set(self.archive.namelist()))
        for path, (digest, size) in listed.items():
            if path.endswith("/RECORD"):
                self.assertEqual((digest, size), ("", ""))
                continue
            data = self.archive.read(path)
            expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            self.assertEqual(digest, f"sha256={expected}", path)
            self.assertEqual(int(size), len(data), path)

    def test_the_command_is_the_stripped_binary_and_executable(self):
        script = f"memscope_gpu-{self.version}.data/scripts/memscope"
        info = self.archive.getinfo(script)
        self.assertEqual(info.external_attr >> 16, 0o100755)
        data = self.archive.read(script)
        self.assertEqual(data[:4], b"\x7fELF")
        self.assertLessEqual(len(data), self.binary.stat().st_size)
        packed = Path(self.scratch.name) / "packed-memscope"
        packed.write_bytes(data)
        sections = readelf("-S", packed)
        self.assertIn(".text", sections)
        self.assertNotIn(".symtab", sections)
        self.assertNotIn(".debug_line", sections)

    def test_the_wheel_file_names_the_tag_it_declares(self):
        tag = re.search(r"^Tag: (.+)$", self.dist_info("WHEEL"), re.M).group(1)
        self.assertEqual(self.wheel.name, f"memscope_gpu-{self.version}-{tag}.whl")
        self.assertIn("Root-Is-Purelib: false", self.dist_info("WHEEL"))
        self.assertRegex(tag, r"^py3-none-manylinux_2_\d+_x86_64$")

    def test_the_metadata_is_pyprojects(self):
        metadata = self.dist_info("METADATA")
        headers, _, body = metadata.partition("\n\n")
        fields = [line.split(": ", 1) for line in headers.splitlines()]
        self.assertIn(["Name", self.pyproject["name"]], fields)
        self.assertIn(["Version", self.version], fields)
        self.assertIn(["Summary", self.pyproject["description"]], fields)
        self.assertIn(["Requires-Python", self.pyproject["requires-python"]], fields)
        self.assertIn(["Requires-Dist", "memscope-agent ; extra == 'agent'"], fields)
        self.assertEqual([v for k, v in fields if k == "Classifier"], self.pyproject["classifiers"])
        self.assertEqual(body.strip(), (ROOT / "packaging" / "README.md").read_text().strip())

    def test_packing_twice_gives_the_same_bytes(self):
        again = pack_wheel.pack(self.binary, Path(self.scratch.name) / "two")
        self.assertEqual(again.read_bytes(), self.wheel.read_bytes())


if __name__ == "__main__":
    unittest.main()
