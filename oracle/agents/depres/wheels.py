"""Wheels and source distributions built with the standard library, for a local package index.

:func:`build_wheel` writes a pure-Python wheel (``*.dist-info/METADATA``, ``WHEEL``,
``RECORD`` with sha256 digests, as PEP 427 says) that real ``pip`` installs;
:func:`build_sdist` writes a source distribution whose in-tree PEP 517 backend
(:data:`SDIST_BACKEND`, standard library only, ``requires = []``, so ``pip`` builds it
offline with build isolation) compiles the package's C sources with ``$CC`` (default
``gcc``) into a shared library that the module loads with ``ctypes``. ``pip`` caches the
wheel it builds in its wheel cache, so a second install of the same sdist skips the
compiler. Archives are byte-for-byte deterministic (fixed timestamps, sorted members).
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import re
import tarfile
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from features.files import atomic_path, write_atomic

__all__ = ["SDIST_BACKEND", "build_sdist", "build_wheel", "module_name", "normalize"]

_EPOCH = (2020, 1, 1, 0, 0, 0)


def normalize(name: str) -> str:
    """The file-name form of a distribution name (PEP 427/625: runs of ``-_.`` -> ``_``)."""
    return re.sub(r"[-_.]+", "_", name).lower()


def module_name(name: str) -> str:
    """The import name a generated distribution uses (``geo-io`` -> ``geo_io``)."""
    return normalize(name)


def _metadata(name: str, version: str, requires: Sequence[str]) -> str:
    return (f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
            + "".join(f"Requires-Dist: {r}\n" for r in requires))


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _wheel_members(name: str, version: str, requires: Sequence[str],
                   files: Mapping[str, bytes]) -> dict[str, bytes]:
    info = f"{normalize(name)}-{version}.dist-info"
    out = dict(sorted(files.items()))
    out[f"{info}/METADATA"] = _metadata(name, version, requires).encode()
    out[f"{info}/WHEEL"] = (b"Wheel-Version: 1.0\nGenerator: ripplecp-depres\n"
                            b"Root-Is-Purelib: true\nTag: py3-none-any\n")
    record = [f"{p},sha256={_digest(b)},{len(b)}" for p, b in out.items()]
    record.append(f"{info}/RECORD,,")
    out[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    return out


def _write_zip(path: Path, members: Mapping[str, bytes]) -> None:
    with atomic_path(path) as tmp, zipfile.ZipFile(tmp, "w") as z:
        for p, data in members.items():
            zi = zipfile.ZipInfo(p, _EPOCH)
            zi.compress_type = zipfile.ZIP_DEFLATED
            zi.external_attr = 0o644 << 16
            z.writestr(zi, data)


def build_wheel(dest: Path, name: str, version: str, requires: Sequence[str],
                files: Mapping[str, bytes]) -> Path:
    """Write ``<name>-<version>-py3-none-any.whl`` into ``dest``; ``files``: path -> bytes."""
    path = Path(dest) / f"{normalize(name)}-{version}-py3-none-any.whl"
    _write_zip(path, _wheel_members(name, version, requires, files))
    return path


#: The in-tree build backend of a generated sdist (standard library only). ``pip`` calls it
#: in an isolated build environment; ``build_wheel`` compiles ``csrc/*.c`` into
#: ``<module>/_ext.so`` with ``$CC`` and packs it with the module's Python files.
SDIST_BACKEND = r'''"""In-tree PEP 517 backend of a generated package: compiles csrc/*.c with $CC."""
import base64, hashlib, json, os, subprocess, zipfile

_INFO = json.load(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "pkginfo.json")))
_EPOCH = (2020, 1, 1, 0, 0, 0)


def _norm():
    return _INFO["normalized"] + "-" + _INFO["version"]


def _metadata():
    return ("Metadata-Version: 2.1\nName: %s\nVersion: %s\n" % (_INFO["name"], _INFO["version"])
            + "".join("Requires-Dist: %s\n" % r for r in _INFO["requires"]))


def get_requires_for_build_wheel(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    info = _norm() + ".dist-info"
    os.makedirs(os.path.join(metadata_directory, info), exist_ok=True)
    with open(os.path.join(metadata_directory, info, "METADATA"), "w") as f:
        f.write(_metadata())
    return info


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    here = os.path.dirname(os.path.abspath(__file__))
    mod = _INFO["module"]
    lib = os.path.join(here, "_ext.so")
    srcs = sorted(os.path.join(here, "csrc", s) for s in os.listdir(os.path.join(here, "csrc")))
    subprocess.run([os.environ.get("CC", "gcc"), "-O2", "-shared", "-fPIC", "-o", lib, *srcs],
                   check=True)
    files = {}
    for root, _, names in os.walk(os.path.join(here, mod)):
        for n in names:
            p = os.path.join(root, n)
            files[os.path.relpath(p, here).replace(os.sep, "/")] = open(p, "rb").read()
    files[mod + "/_ext.so"] = open(lib, "rb").read()
    info = _norm() + ".dist-info"
    files[info + "/METADATA"] = _metadata().encode()
    files[info + "/WHEEL"] = (b"Wheel-Version: 1.0\nGenerator: ripplecp-depres\n"
                              b"Root-Is-Purelib: false\nTag: py3-none-any\n")
    rec = ["%s,sha256=%s,%d" % (p, base64.urlsafe_b64encode(hashlib.sha256(b).digest())
                                .rstrip(b"=").decode(), len(b)) for p, b in sorted(files.items())]
    rec.append(info + "/RECORD,,")
    files[info + "/RECORD"] = ("\n".join(rec) + "\n").encode()
    name = _norm() + "-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as z:
        for p, b in sorted(files.items()):
            zi = zipfile.ZipInfo(p, _EPOCH)
            zi.compress_type = zipfile.ZIP_DEFLATED
            zi.external_attr = 0o755 << 16 if p.endswith(".so") else 0o644 << 16
            z.writestr(zi, b)
    return name
'''


def build_sdist(dest: Path, name: str, version: str, requires: Sequence[str],
                files: Mapping[str, bytes], c_sources: Mapping[str, str]) -> Path:
    """Write ``<name>-<version>.tar.gz``: ``files`` (the module), ``csrc/`` and the backend."""
    norm = normalize(name)
    top = f"{norm}-{version}"
    members: dict[str, bytes] = {
        "pyproject.toml": (b'[build-system]\nrequires = []\nbuild-backend = "backend"\n'
                           b'backend-path = ["."]\n'),
        "PKG-INFO": _metadata(name, version, requires).encode(),
        "backend.py": SDIST_BACKEND.encode(),
        "pkginfo.json": json.dumps({"name": name, "version": version, "normalized": norm,
                                    "module": module_name(name), "requires": list(requires)},
                                   sort_keys=True).encode(),
        **dict(files),
        **{f"csrc/{k}": v.encode() for k, v in c_sources.items()},
    }
    path = Path(dest) / f"{top}.tar.gz"
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as t:
        for p, data in sorted(members.items()):
            ti = tarfile.TarInfo(f"{top}/{p}")
            ti.size, ti.mtime, ti.mode = len(data), 1577836800, 0o644
            t.addfile(ti, io.BytesIO(data))
    write_atomic(path, lambda f: f.write(gzip.compress(raw.getvalue(), mtime=0)))
    return path
