"""A plan of text edits to files, shown as a unified diff and written atomically: never through a
link, never leaving a half-written file.

Imports: core only.
"""

from __future__ import annotations

import difflib
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from stopdoctor.core.errors import InputError


@dataclass(frozen=True)
class FileEdit:
    path: Path  # the file to write
    label: str  # the name shown in the diff
    before: str | None  # None: the file is created
    after: str
    reason: str

    def diff(self) -> str:
        before = [] if self.before is None else self.before.splitlines(keepends=True)
        after = self.after.splitlines(keepends=True)
        lines = difflib.unified_diff(before, after, "/dev/null" if self.before is None else f"a/{self.label}",
                                     f"b/{self.label}")
        out = []
        for line in lines:
            out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
        return "".join(out)


@dataclass(frozen=True)
class FixPlan:
    edits: tuple[FileEdit, ...]
    notes: tuple[str, ...]  # defects found that have no safe mechanical fix

    def diff(self) -> str:
        return "".join(edit.diff() for edit in self.edits)

    def write(self, backup: bool = False) -> None:
        """Write every edit; `backup` keeps each old file as FILE.bak first. An edit that knows how
        to write itself (a GGUF metadata edit, `actions.gguf_edit`) does so."""
        for edit in self.edits:
            refuse_linked(edit.path)
        for edit in self.edits:
            if hasattr(edit, "write"):
                edit.write(backup)
                continue
            if backup and edit.path.exists():
                keep_backup(edit.path)
            write_atomically(edit.path, edit.after)


def keep_backup(path: Path) -> Path:
    """Keep `path` as `path.bak` before it is replaced: a hard link to the old bytes (the
    replacement is a rename, so the link keeps the old file whole), else a copy. Refuses to
    overwrite an earlier backup."""
    backup = path.with_name(path.name + ".bak")
    if os.path.lexists(backup):
        raise InputError(f"{backup} already exists; nothing was changed", "move the earlier backup away and run fix again")
    try:
        os.link(path, backup)
    except OSError:
        import shutil

        try:
            shutil.copy2(path, backup)
        except OSError as exc:
            raise InputError(f"cannot write the backup {backup}: {exc.strerror or exc}; nothing was changed") from exc
    return backup


def refuse_linked(path: Path) -> None:
    """Never write through a symlink or a hard link: the bytes would land outside the model folder
    (a hub cache snapshot links every file to a shared blob)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        info = None
    if info is not None and stat.S_ISLNK(info.st_mode):
        raise InputError(f"{path} is a symbolic link; stopdoctor does not write through links",
                         "copy the model folder (cp -rL) and fix the copy")
    if info is not None and info.st_nlink > 1:
        raise InputError(f"{path} has {info.st_nlink} hard links; writing it would change the other copies too",
                         "copy the file (cp --remove-destination) and run fix again")


def write_atomically(path: Path, text: str) -> None:
    """Temp file in the same folder, flushed, then renamed over the target: a failure leaves the
    old file whole. Keeps the file's permissions."""
    mode = stat.S_IMODE(os.stat(path).st_mode) if path.exists() else 0o644
    try:
        handle = tempfile.NamedTemporaryFile("w", encoding="utf-8", newline="", dir=path.parent,
                                             prefix=f".{path.name}.", suffix=".tmp", delete=False)
    except OSError as exc:
        raise InputError(f"cannot write in {path.parent}: {exc.strerror or exc}; nothing was changed") from exc
    try:
        with handle:
            # newline="" keeps the file's own line endings: the edit text already carries them.
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(handle.name, mode)
        os.replace(handle.name, path)
    except BaseException as exc:
        Path(handle.name).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise InputError(f"cannot write {path}: {exc.strerror or exc}; the file is unchanged") from exc
        raise
