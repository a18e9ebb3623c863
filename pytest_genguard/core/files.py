"""Writing files a user owns: whole or not at all, with the permissions any file they write would get; manifests
that vouch for the files beside them by sha256."""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path


def atomic_write_text(path: Path | str, text: str, *, errors: str = "strict", fsync: bool = False) -> None:
    """Write `text` as UTF-8 through a temp file in the same folder and `os.replace`: readers never see half a file.

    The temp file is created with mode 0666 so the umask applies (tempfile.mkstemp would leave 0600 snapshots).
    `errors="surrogateescape"` writes surrogate-escaped bytes back as bytes; `fsync` makes the data durable before
    the rename (cache manifests, written last, vouch for everything else).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n", errors=errors) as handle:
            handle.write(text)
            if fsync:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_snapshot(path: Path | str, text: str) -> None:
    """Write a snapshot's text: the one write of every ``.genguard`` snapshot or baseline, by ``--snapshot-update``,
    ``--genguard-update-stale`` and ``genguard review --accept`` alike, so accepting a pending trace gives the bytes a
    run would have written. Surrogate-escaped bytes (a token that is not UTF-8 on its own) are written back as bytes."""
    atomic_write_text(path, text, errors="surrogateescape")


def text_bytes_sha256(text: str) -> str:
    """The sha256 of the bytes `write_snapshot` writes for `text` (and that reading a snapshot decodes back to it)."""
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


def file_sha256(path: Path) -> str:
    """The sha256 of a file's bytes, read in 1 MiB chunks (cache entries and pins vouch for their files with it)."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def file_records(folder: Path, names: Iterable[str]) -> dict[str, dict[str, object]]:
    """Each file's sha256 and size: what a manifest lists to vouch for the files beside it (cache entries, pins)."""
    return {name: {"sha256": file_sha256(folder / name), "size": (folder / name).stat().st_size} for name in names}


def text_sha256(path: Path) -> str:
    """The sha256 of a text file's bytes with CRLF line endings read as LF: what genguard wrote (it writes LF), even
    after a checkout with ``core.autocrlf=true`` (the Windows default) rewrote every line ending."""
    return hashlib.sha256(path.read_bytes().replace(b"\r\n", b"\n")).hexdigest()


def file_records_problem(
    folder: Path, records: Mapping[str, object], manifest: str, *, text: Iterable[str] = ()
) -> str | None:
    """The first file `records` lists that is missing or does not match its sha256, said as a problem (None: all
    fine); `manifest` is the manifest's name, for the message. Files named in `text` (genguard writes them with LF
    endings) also match with their line endings turned into CRLF by git."""
    text = frozenset(text)
    for name, meta in records.items():
        path = folder / str(name)
        if not path.is_file():
            return f"{name} is missing"
        expected = meta.get("sha256") if isinstance(meta, dict) else None
        if file_sha256(path) == expected or (name in text and text_sha256(path) == expected):
            continue
        return f"{name} does not match its sha256 in {manifest} (truncated or modified)"
    return None


def write_manifest(path: Path, manifest: Mapping[str, object]) -> None:
    """A manifest as sorted, indented JSON, written atomically and made durable: it is written last and vouches for
    everything else."""
    atomic_write_text(path, json.dumps(manifest, indent=2, sort_keys=True) + "\n", fsync=True)
