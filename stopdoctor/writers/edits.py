"""A plan of text edits to files, shown as a unified diff and written atomically: never through a
link, never leaving a half-written file.

Imports: core only.
"""

from __future__ import annotations

import difflib
import os
import stat
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from stopdoctor.core.errors import InputError
from stopdoctor.core.records import record


@record
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


@record
class FixPlan:
    edits: tuple[FileEdit, ...]
    notes: tuple[str, ...]  # defects found that have no safe mechanical fix
    fixes: tuple[str, ...] = ()  # the finding codes the edits remove (SD101, SD401, SD405)

    def diff(self) -> str:
        return "".join(edit.diff() for edit in self.edits)

    def write(self, backup: bool = False) -> None:
        """Every edit or none (`stage`, then `StagedPlan.commit`)."""
        staged = self.stage(backup)
        try:
            staged.commit()
        finally:
            staged.discard()

    def stage(self, backup: bool = False) -> StagedPlan:
        """Check every target and write every new file beside it, changing nothing yet: each target
        a regular file reached by no link, no FILE.bak in the way with `backup`, each new text (and
        a GGUF's new bytes, `writers.gguf_edit`) staged in a temporary file, flushed. Whatever
        refuses (a link, an earlier backup, a read-only folder, a full disk, a GGUF the editor
        cannot rewrite exactly) refuses here, before anything is changed or printed."""
        for edit in self.edits:
            refuse_linked(edit.path)
            backup_path = edit.path.with_name(edit.path.name + ".bak")
            if backup and os.path.lexists(backup_path) and edit.path.exists():
                raise InputError(f"{backup_path} already exists (move the earlier backup away); nothing was changed")
        staged: list[tuple[FileEdit, Path]] = []
        try:
            for edit in self.edits:
                staged.append((edit, edit.stage() if hasattr(edit, "stage") else stage(edit.path, edit.after)))
        except BaseException:
            for _, temp in staged:
                temp.unlink(missing_ok=True)
            raise
        # An edit that cannot be undone from its old text (a GGUF's bytes) is renamed last: when a
        # rename before it fails, the files already replaced are put back and it is never touched.
        staged.sort(key=lambda pair: hasattr(pair[0], "stage"))
        return StagedPlan(tuple(staged), backup)


@dataclass
class StagedPlan:
    """Every new file written beside its target; `commit` renames them into place, all or none."""

    staged: tuple[tuple[FileEdit, Path], ...]
    backup: bool

    def commit(self) -> None:
        """Rename each staged file over its target (keeping FILE.bak first with `backup`). A failure
        (an immutable file, a backup the disk refuses) puts back the files already replaced, removes
        the backups made, and says nothing was changed."""
        replaced: list[FileEdit] = []
        backups: list[Path] = []
        for edit, temp in self.staged:
            try:
                if self.backup and edit.path.exists():
                    backups.append(keep_backup(edit.path))
                os.replace(temp, edit.path)
            except (OSError, InputError) as exc:
                for done in reversed(replaced):
                    _restore(done)
                for made in backups:
                    made.unlink(missing_ok=True)
                why = exc.message if isinstance(exc, InputError) else (exc.strerror or exc)
                raise InputError(f"cannot write {edit.path}: {why}; nothing was changed") from exc
            replaced.append(edit)

    def discard(self) -> None:
        """Remove what was staged and not renamed (after a failure, or instead of a commit)."""
        for _, temp in self.staged:
            temp.unlink(missing_ok=True)


def _restore(edit: FileEdit) -> None:
    """Put back the file an edit replaced (best effort: the disk just refused a write)."""
    try:
        if edit.before is None:
            edit.path.unlink(missing_ok=True)
        else:
            os.replace(stage(edit.path, edit.before), edit.path)
    except (OSError, InputError):
        pass


def keep_backup(path: Path) -> Path:
    """Keep `path` as `path.bak` before it is replaced: a hard link to the old bytes (the
    replacement is a rename, so the link keeps the old file whole), else a copy. Refuses to
    overwrite an earlier backup."""
    backup = path.with_name(path.name + ".bak")
    if os.path.lexists(backup):
        raise InputError(f"{backup} already exists (move the earlier backup away); nothing was changed")
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
    (a hub cache snapshot links every file to a shared blob). Never replace what is not a regular
    file (a folder, a named pipe, a device) either."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise InputError(f"{path}: cannot be checked before writing: {exc.strerror or exc}; nothing was changed") from exc
    if info is not None and stat.S_ISLNK(info.st_mode):
        raise InputError(f"{path} is a symbolic link; stopdoctor does not write through links",
                         "copy the model folder (cp -rL) and fix the copy")
    if info is not None and not stat.S_ISREG(info.st_mode):
        raise InputError(f"{path} is not a regular file (a folder, named pipe or device); stopdoctor replaces only files",
                         "move it aside and run fix again")
    if info is not None and info.st_nlink > 1:
        raise InputError(f"{path} has {info.st_nlink} hard links; writing it would change the other copies too",
                         "copy the file (cp --remove-destination) and run fix again")


def stage(path: Path, text: str) -> Path:
    """`text` in a temporary file in `path`'s folder, flushed to disk, with `path`'s permissions:
    ready to be renamed over `path`. A failure leaves nothing behind."""
    # newline="" keeps the file's own line endings: the edit text already carries them.
    return stage_with(path, lambda handle: handle.write(text))


def stage_with(path: Path, write: Callable[[IO], object], binary: bool = False) -> Path:
    """What `write(handle)` writes, in a temporary file in `path`'s folder, flushed to disk, with
    `path`'s permissions: ready to be renamed over `path`. A failure leaves nothing behind."""
    mode = stat.S_IMODE(os.stat(path).st_mode) if path.exists() else 0o644
    options: dict[str, Any] = {} if binary else {"encoding": "utf-8", "newline": ""}
    try:
        handle = tempfile.NamedTemporaryFile("wb" if binary else "w", dir=path.parent, prefix=f".{path.name}.",
                                             suffix=".tmp", delete=False, **options)
    except OSError as exc:
        raise InputError(f"cannot write in {path.parent}: {exc.strerror or exc}; nothing was changed") from exc
    try:
        with handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(handle.name, mode)
    except BaseException as exc:
        Path(handle.name).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise InputError(f"cannot write {path}: {exc.strerror or exc}; nothing was changed") from exc
        raise
    return Path(handle.name)


def replace_with(temp: Path, path: Path, backup: bool = False) -> None:
    """Rename the staged `temp` over `path` (keeping the old file as FILE.bak first with `backup`);
    a failure removes `temp` and leaves the old file whole."""
    try:
        if backup and path.exists():
            keep_backup(path)
        os.replace(temp, path)
    except BaseException as exc:
        temp.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise InputError(f"cannot write {path}: {exc.strerror or exc}; the file is unchanged") from exc
        raise


def write_atomically(path: Path, text: str) -> None:
    """Temp file in the same folder, flushed, then renamed over the target: a failure leaves the
    old file whole. Keeps the file's permissions."""
    replace_with(stage(path, text), path)
