"""Compile C/C++ into objects and shared objects, cached by content hash.

Each build lives in `<cache>/<kind>/<hash>/` holding the source, the exact
command (`cmd.txt`), the compiler's output (`build.log`), the product (a
`.o` or `.so`) and `manifest.json` (the product's SHA-256 and size), so a
build can be inspected and rerun by hand.  The hash covers the source text,
the command and the versions of Python and torch, so a change of any of
them builds anew.

An SCM is built in two steps: each version's unit, and the small dispatcher
unit, is compiled to an object in `obj/<hash>/` (reused while its text is
unchanged, which is always for the versions a rebuild keeps), then those
objects are linked into `scm/<hash>/scm.so` (the dispatcher's source beside).

Loading a cached `.so` runs its constructors in this process, so the cache
is trusted only as far as docs/cache.md says: its root and kind folders
must be ours and writable by no one else (else a private temporary cache
is used), every folder is made 0700, and a product is returned only after
it matches the digest its build recorded (else it is built again).  The
cache is kept under TRIDENT_CACHE_MAX_MB by evicting the least recently
used builds.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import importlib.util
import json
import logging
import os
import secrets
import shlex
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import warnings
from pathlib import Path

from .. import config
from ..errors import BuildError, user_stacklevel
from ..ir.nodes import Frozen, frozen

_log = logging.getLogger("trident")
RUNTIME_DIR = Path(__file__).resolve().parent.parent / "runtime"
KINDS = ("obj", "persist", "runtime", "scm")
# The C++ runtime's files (runtime/), all hashed into its build; the first names the product.
RUNTIME_SOURCES = (
    "trident_rt.cpp", "trident_rt_types.cpp", "trident_rt_binder.cpp", "trident_rt_loader.cpp",
    "trident_rt_api.cpp", "trident_rt_ops.cpp", "trident_rt_launch.cpp",
    "trident_rt_test_hooks.cpp", "trident_rt.h", "trident_rt_py.h", "trident_rt_internal.h")
MANIFEST = "manifest.json"
# A temporary folder (`.<hash>-*`) older than this was left by a killed build.
STALE_SECONDS = 3600
_lock = threading.Lock()
_runtime = None

# Per process: configured root -> the root used (itself, or a private temporary one).
_roots: dict[Path, Path] = {}
# Product -> (device, inode, size, mtime, ctime, SHA-256) when its digest last matched: a
# product unchanged since then is not hashed again in this process.
_verified: dict[Path, tuple] = {}
# Build folders this process returned a product of (or is building): never evicted.
_in_use: set[Path] = set()
_warned: set[Path] = set()
# Root -> its total size in bytes as of its last scan, plus what this process built since.
_sizes: dict[Path, int] = {}
_state = threading.RLock()
# (kind, files, command template) -> the build's hash: a rebuild asks for every version's
# object, and hashing each unit again with its headers (43 KB) cost 0.1 ms a version.  The
# texts are the SCMs' own strings, whose hashes Python keeps.
_tags: dict = {}


@functools.lru_cache(maxsize=None)
def _python_include() -> str:
    return sysconfig.get_paths()["include"]  # 0.6 ms a call: once per unit of every rebuild


def _digest(*parts: str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode())
        h.update(b"\0")
    return h.hexdigest()[:20]


# -- the cache root --------------------------------------------------------------------------


def cache_root() -> Path:
    """The root every build goes under: `config.cache_dir()` if it is a folder of ours that no
    one else can write to (and so are its kind folders that exist), else a private temporary
    folder for the rest of the process, with one RuntimeWarning saying why.  Checked once per
    process (per configured folder); that first use also trims the cache to its size limit, in
    a thread (`_trim_later`)."""
    want = config.cache_dir()
    with _state:
        root = _roots.get(want)
        if root is None:
            root = _roots[want] = _trusted_root(want)
            _trim_later(root)
        return root


# The first use's trims in flight: root -> thread (`wait_trims` joins them).
_trims: dict = {}


def _trim_later(root: Path) -> None:
    """`trim_cache(root)` in a daemon thread: its scan costs about 55 us per build folder
    (0.17 s for 3000 on the 2-core machine), which a new process's first call would otherwise
    wait for; run beside it, it did not slow a Python loop of the main thread.  A build this
    process verifies meanwhile and the thread then evicts is found missing or changed when
    used, as another process's eviction would be (`_build` builds it again; a load that fails
    verifies once more).  An eviction cut short at exit leaves a `.`-folder that stale removal
    deletes."""
    def run():
        try:
            trim_cache(root)
        except Exception:  # noqa: BLE001 - trimming only saves disk
            _log.debug("trident: trimming %s failed", root, exc_info=True)

    t = threading.Thread(target=run, name="trident-cache-trim", daemon=True)
    _trims[root] = t
    try:
        t.start()
    except RuntimeError:  # no thread to be had (interpreter shutting down): trim here
        del _trims[root]
        run()


def wait_trims(timeout: float | None = None) -> bool:
    """Wait for the first-use trims in flight; whether none is left."""
    deadline = None if timeout is None else time.monotonic() + timeout
    for t in list(_trims.values()):
        t.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
    return not any(t.is_alive() for t in _trims.values())


def _trusted_root(root: Path) -> Path:
    try:
        _make_dir(root)
        problem = _untrusted_dir(root) or next(
            (p for k in KINDS if (root / k).exists() and (p := _untrusted_dir(root / k))), None)
    except OSError as e:
        problem = f"{root} cannot be used ({type(e).__name__}: {e})"
    if problem is None:
        return root
    private = Path(tempfile.mkdtemp(prefix="trident-cache-"))  # 0700, ours
    atexit.register(shutil.rmtree, private, True)
    warnings.warn(f"trident: not loading builds from the cache {root}: {problem}; this process "
                  f"builds in the private temporary folder {private} instead "
                  "(see docs/cache.md)", RuntimeWarning, stacklevel=user_stacklevel())
    return private


def _untrusted_dir(path: Path) -> str | None:
    """Why `path` may hold files someone else put there, or None."""
    st = os.stat(path)
    if not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a folder"
    return _not_ours(path, st)


def _not_ours(path: Path, st: os.stat_result) -> str | None:
    if st.st_uid != os.getuid():
        return f"{path} is owned by uid {st.st_uid}, not by this user (uid {os.getuid()})"
    if st.st_mode & 0o022:
        return (f"{path} is writable by group or others "
                f"(mode {stat.S_IMODE(st.st_mode):04o})")
    return None


def _make_dir(path: Path) -> None:
    """Create `path` 0700 (whatever the umask) unless it exists.  Missing folders above the
    cache root get the umask's mode."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        return
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            return
    os.chmod(path, 0o700)


# -- verifying a product ----------------------------------------------------------------------


def _sha256(fd: int) -> str:
    h = hashlib.sha256()
    while chunk := os.read(fd, 1 << 20):
        h.update(chunk)
    return h.hexdigest()


def _problem(out_dir: Path, product: Path) -> str | None:
    """Why `product` in the build folder `out_dir` must not be used, or None: it must be a
    regular file of ours, in a folder of ours, whose size and SHA-256 are the ones its
    manifest (also ours) records.  A product unchanged (same inode, size, mtime and ctime)
    since it last matched in this process is not hashed again, nor is its manifest read again
    (two `lstat`s: a rebuild after a miss checks every version's object)."""
    known = _verified.get(product)
    if known is not None:
        with contextlib.suppress(OSError):
            st = os.lstat(out_dir)
            if stat.S_ISDIR(st.st_mode) and _not_ours(out_dir, st) is None:
                st = os.lstat(product)
                if stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid() and known[:5] == (
                        st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns):
                    return None
    try:
        st = os.lstat(out_dir)
        if not stat.S_ISDIR(st.st_mode):
            return "it is not a folder"
        if why := _not_ours(out_dir, st):
            return why
        raw = _read_own(out_dir / MANIFEST)
        if raw is None:
            return f"{MANIFEST} is missing (a build from before manifests, or a planted one)"
        try:
            manifest = json.loads(raw)
            want = (manifest["product"], int(manifest["size"]), str(manifest["sha256"]))
        except (ValueError, KeyError, TypeError) as e:
            return f"{MANIFEST} is garbled ({type(e).__name__})"
        if want[0] != product.name:
            return f"{MANIFEST} describes {want[0]!r}, not {product.name}"
        try:
            fd = os.open(product, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            return f"{product.name} is missing"
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return f"{product.name} is not a regular file"
            if st.st_uid != os.getuid():
                return f"{product.name} is owned by uid {st.st_uid}"
            if st.st_size != want[1]:
                return f"{product.name} has {st.st_size} bytes, its manifest says {want[1]}"
            key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, want[2])
            if _verified.get(product) == key:
                return None
            if _sha256(fd) != want[2]:
                return f"the SHA-256 of {product.name} is not the one its manifest records"
        finally:
            os.close(fd)
    except OSError as e:  # a symlink (O_NOFOLLOW), a folder we cannot read, ...
        return f"it cannot be checked ({type(e).__name__}: {e})"
    _verified[product] = key
    return None


def _read_own(path: Path) -> bytes | None:
    """The bytes of `path`, a regular file of ours (OSError if it is not); None if missing."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
            raise OSError(f"{path} is not a regular file of this user")
        return f.read()


def _discard(folder: Path) -> bool:
    """Remove a build folder: first one rename aside (no process sees it half removed), then
    delete.  False if it was not there (or could not be moved)."""
    aside = folder.with_name(f".{folder.name}-old-{secrets.token_hex(4)}")
    try:
        os.rename(folder, aside)
    except OSError:
        return False
    _remove(aside)
    with _state:
        for p in [p for p in list(_verified) if p.parent == folder]:
            del _verified[p]
    return True


def _remove(path: str | Path) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            os.unlink(path)


def discard_scm(so, dispatcher=None) -> None:
    """Remove the build folder `scm/<hash>/` of a superseded SCM whose shared object is `so`,
    and that of its dispatcher's object `dispatcher` (`obj/<hash>/scm.o`; no other function's
    SCM links either: the dispatcher's text names its function).  A process that has the SCM loaded keeps its
    mapping; one that needs it later builds it again.  Nothing happens for a path outside
    this cache's folders or a folder already gone."""
    for path, kind in ((so, "scm"), (dispatcher, "obj")):
        if path is None:
            continue
        folder = Path(path).parent
        if folder.parent != cache_root() / kind:
            continue
        with _state:
            _in_use.discard(folder)
        _discard(folder)


# -- stored products (persisted SCM records: trident/persist/) ------------------------------------


def store(kind: str, name: str, product: str, data: bytes) -> Path:
    """Write `data` as the product `product` of the new folder `<cache>/<kind>/<name>/`, as a
    build is written: in a private folder (0700) of the kind folder, product and manifest
    written (`_seal`), then renamed into place, so no process sees it half written.  Returns the folder;
    FileExistsError if `name` is taken."""
    kind_dir = cache_root() / kind
    _make_dir(kind_dir)
    _remove_stale(kind_dir)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=kind_dir))
    try:
        fd = os.open(tmp / product, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.lseek(fd, 0, os.SEEK_SET)  # _seal hashes from here
        except BaseException:
            os.close(fd)
            raise
        key = _seal(tmp, fd, product)
        out = kind_dir / name
        if os.path.lexists(out):
            raise FileExistsError(out)
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _verified[out / product] = key
    _grew(kind_dir.parent, out)
    return out


def read_verified(folder: Path, product: str) -> tuple[bytes | None, str | None]:
    """The bytes of `folder/product` once verified as a build's product is (`_problem`: a
    folder and files of ours, size and SHA-256 as its manifest records; the bytes read are
    hashed again), and None; or None and why it must not be used.  A use touches the
    manifest (least recently used eviction)."""
    path = folder / product
    why = _problem(folder, path)
    if why is not None:
        return None, why
    try:
        data = _read_own(path)
        want = json.loads(_read_own(folder / MANIFEST) or b"{}").get("sha256")
    except (OSError, ValueError) as e:
        return None, f"it cannot be read ({type(e).__name__}: {e})"
    if data is None or hashlib.sha256(data).hexdigest() != want:
        return None, f"{product} changed after it was verified"
    _touch(folder / MANIFEST)
    return data, None


def discard(folder: Path) -> bool:
    """Remove a folder of a kind folder of this cache (renamed aside first, as eviction does).
    False for a path elsewhere or a folder already gone."""
    folder = Path(folder)
    if folder.parent.parent != cache_root() or folder.parent.name not in KINDS:
        return False
    return _discard(folder)


def _warn_rebuilt(out_dir: Path, why: str) -> None:
    with _state:
        if out_dir in _warned:
            return
        _warned.add(out_dir)
    warnings.warn(f"trident: rebuilt {out_dir}: {why}", RuntimeWarning,
                  stacklevel=user_stacklevel())


# -- building ---------------------------------------------------------------------------------


def _submit(ex, fn, *args):
    """`ex.submit(fn, *args)`; once the interpreter is shutting down (a background build that
    a process's exit waits for: concurrent.futures then refuses new work), `fn` runs here and
    its outcome is the future's."""
    from concurrent.futures import Future

    try:
        return ex.submit(fn, *args)
    except RuntimeError:
        if not sys.is_finalizing() and not _executors_shut_down():
            raise
    f = Future()
    try:
        f.set_result(fn(*args))
    except BaseException as e:  # noqa: BLE001 - the future carries it, as ex.submit's would
        f.set_exception(e)
    return f


def _executors_shut_down() -> bool:
    from concurrent.futures import thread

    return bool(getattr(thread, "_shutdown", False))


def after_fork_in_child() -> None:
    """In a forked child: the lock a building thread of the parent may have held, anew."""
    global _state
    _state = threading.RLock()
    _trims.clear()  # their threads did not come along


def _build(kind: str, files: dict, cmd_for, what: str, suffix: str = ".so",
           speedup=None, cached_only: bool = False) -> tuple[Path | None, bool]:
    """Build `files` ({name: text}; the first is compiled with the others
    beside it) unless a build with the same hash exists.  Returns the
    product (named after the first file, with `suffix`), verified as
    `_problem` says, and whether this call compiled it.  A cached build that
    fails verification is moved aside and built again, with one warning.

    `speedup`, if given, is called only when this call compiles: it returns extra compiler
    arguments that make the same product faster (a precompiled header), which the hash does
    not cover; a compile that fails with them runs again without them.

    `cached_only`: return (None, False) instead of compiling when no verified build exists."""
    import torch

    source_name = next(iter(files))
    template = "\n".join(" ".join(c) for c in _steps(cmd_for(["SRC"], "OUT")))
    memo = (kind, tuple(files.items()), template)
    tag = _tags.get(memo)
    if tag is None:
        tag = _digest(*files.values(), _portable(template), sys.version, torch.__version__)
        if len(_tags) >= 4096:
            _tags.clear()
        _tags[memo] = tag
    kind_dir = cache_root() / kind
    out_dir = kind_dir / tag
    product = out_dir / (Path(source_name).stem + suffix)
    with _state:
        _in_use.add(out_dir)
    for _ in range(3):
        if os.path.lexists(out_dir):
            why = _problem(out_dir, product)
            if why is None:
                _touch(out_dir / MANIFEST)
                return product, False
            if cached_only:
                return None, False
            _warn_rebuilt(out_dir, why)
            _discard(out_dir)
        if cached_only:
            return None, False
        _make_dir(kind_dir)
        tmp, key = _compile(kind_dir, tag, files, cmd_for, what, product.name, speedup)
        try:
            # Build in a private folder, then rename: concurrent processes never see (or
            # load) a half-written product.
            os.rename(tmp, out_dir)
        except OSError:  # another process (or thread) renamed its build there first
            shutil.rmtree(tmp, ignore_errors=True)
            continue  # use the winner's build if it verifies
        _verified[product] = key
        _grew(kind_dir.parent, out_dir)
        return product, True
    # Three builds lost the race to builds that failed verification: use a fresh one from
    # its private folder (a stale `.`-folder, removed an hour from now).
    tmp, key = _compile(kind_dir, tag, files, cmd_for, what, product.name, speedup)
    _verified[tmp / product.name] = key
    return tmp / product.name, True


def _compile(kind_dir: Path, tag: str, files: dict, cmd_for, what: str,
             name: str, speedup=None) -> tuple[Path, tuple]:
    """Compile in a new private folder `.<tag>-*` of `kind_dir`; write the product's manifest
    there.  Returns the folder and the product's `_verified` key."""
    _remove_stale(kind_dir)
    tmp = Path(tempfile.mkdtemp(prefix=f".{tag}-", dir=kind_dir))
    for n, text in files.items():
        (tmp / n).write_text(text)
    cmd = cmd_for([str(tmp / n) for n in files if n.endswith((".c", ".cpp"))], str(tmp / name))
    if isinstance(cmd[0], list):  # compile steps run in parallel, then the link
        return tmp, _compile_steps(tmp, cmd, what, name)
    extra = speedup() if speedup is not None else []
    for attempt in ([cmd[0], *extra, *cmd[1:]], cmd) if extra else (cmd,):
        (tmp / "cmd.txt").write_text(shlex.join(attempt) + "\n")
        try:
            proc = subprocess.run(attempt, capture_output=True, text=True, cwd=tmp, check=False)
        except OSError as e:  # no such compiler
            raise BuildError(what, attempt, f"{type(e).__name__}: {e}") from e
        if proc.returncode == 0:
            break
    cmd = attempt
    log = proc.stdout + proc.stderr
    (tmp / "build.log").write_text(log)
    if proc.returncode != 0:
        raise BuildError(what, cmd, log)
    try:
        fd = os.open(tmp / name, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        raise BuildError(what, cmd, log + f"\n(the compiler wrote no {name})") from None
    return tmp, _seal(tmp, fd, name)


@functools.lru_cache(maxsize=1)
def _install_roots() -> tuple:
    """(folder, placeholder) of the packages whose paths a build command names: torch's
    headers and libraries, Triton's cuda.h (with Triton's version, which then stands for the
    header)."""
    import torch

    roots = [(os.path.dirname(torch.__file__), "<torch>")]
    spec = importlib.util.find_spec("triton")
    if spec is not None and spec.origin:
        try:
            from importlib.metadata import version

            v = version("triton")
        except Exception:  # noqa: BLE001 - no metadata: the path itself stays in the hash
            v = None
        if v is not None:
            roots.append((os.path.dirname(spec.origin), f"<triton {v}>"))
    return tuple(roots)


def _portable(template: str) -> str:
    """A build command as its hash sees it: torch's and Triton's folders by name, so that a
    checkout or a venv with the same sources, Python, torch and Triton finds the same build
    (sources and headers are copied into the build folder; nothing is included from the
    checkout)."""
    for root, name in _install_roots():
        template = template.replace(root + os.sep, name + os.sep).replace(root + " ", name + " ")
    return template


def _steps(cmd: list) -> list[list[str]]:
    """A build's commands: one, or (a list of lists) its compile steps and then its link."""
    return cmd if cmd and isinstance(cmd[0], list) else [cmd]


def _compile_steps(tmp: Path, cmds: list, what: str, name: str) -> tuple:
    """Run `cmds[:-1]` (independent compiles) in parallel in `tmp`, then `cmds[-1]` (the link);
    write every command to cmd.txt and every output to build.log.  Returns the product's
    `_verified` key."""
    from concurrent.futures import ThreadPoolExecutor

    (tmp / "cmd.txt").write_text("".join(shlex.join(c) + "\n" for c in cmds))

    def run(c):
        try:
            return c, subprocess.run(c, capture_output=True, text=True, cwd=tmp, check=False)
        except OSError as e:  # no such compiler
            raise BuildError(what, c, f"{type(e).__name__}: {e}") from e

    with ThreadPoolExecutor(max_workers=max(1, min(len(cmds) - 1, os.cpu_count() or 1))) as ex:
        done = [f.result() for f in [_submit(ex, run, c) for c in cmds[:-1]]]
    done.append(run(cmds[-1]) if all(p.returncode == 0 for _, p in done) else (None, None))
    log = "".join(p.stdout + p.stderr for _, p in done if p is not None)
    (tmp / "build.log").write_text(log)
    for c, p in done:
        if p is not None and p.returncode != 0:
            raise BuildError(what, c, log)
    for c in cmds[:-1]:  # the intermediate objects: only the product is kept
        with contextlib.suppress(OSError):
            os.unlink(tmp / c[c.index("-o") + 1])
    try:
        fd = os.open(tmp / name, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        raise BuildError(what, cmds[-1], log + f"\n(the linker wrote no {name})") from None
    return _seal(tmp, fd, name)


def _seal(tmp: Path, fd: int, name: str) -> tuple:
    """Hash the product `name` (open as `fd`, which this closes) and write its manifest beside
    it (a temporary name, then renamed).  Returns its `_verified` key.

    Nothing is fsynced: the folder is renamed into place only once both are written, so no
    process sees a half-written build, and what a crash of the machine could leave (an empty
    or partly written product or manifest in a folder already renamed) fails verification and
    is built again.  Four fsyncs per product cost 3-30 ms each on a busy disk, 12 per miss."""
    try:
        st = os.fstat(fd)
        sha = _sha256(fd)
    finally:
        os.close(fd)
    text = json.dumps({"product": name, "size": st.st_size, "sha256": sha}) + "\n"
    part = tmp / f".{MANIFEST}.part"
    with open(part, "w") as f:
        f.write(text)
    os.rename(part, tmp / MANIFEST)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, sha)


# Manifest -> when this process last touched it.
_touched: dict[Path, float] = {}
# A use touches a manifest at most this often (a rebuild uses every version's object).
TOUCH_SECONDS = 60.0


def _touch(path: Path) -> None:
    """Mark a build as used now (eviction removes the least recently used first); at most
    once a minute per build and process."""
    now = time.monotonic()
    if now - _touched.get(path, -TOUCH_SECONDS) < TOUCH_SECONDS:
        return
    _touched[path] = now
    with contextlib.suppress(OSError):
        os.utime(path)


def _remove_stale(kind_dir: Path) -> None:
    """Remove the temporary folders (`.<hash>-*`) that killed builds or removals left."""
    old = time.time() - STALE_SECONDS
    try:
        entries = [e for e in os.scandir(kind_dir) if e.name.startswith(".")]
    except OSError:
        return
    for e in entries:
        with contextlib.suppress(OSError):
            if e.stat(follow_symlinks=False).st_mtime < old:
                _remove(e.path)


def _grew(root: Path, out_dir: Path) -> None:
    """Count a new build; scan and trim the cache only once the count passes the limit."""
    try:
        size = sum(f.stat(follow_symlinks=False).st_size for f in os.scandir(out_dir))
    except OSError:
        return
    with _state:
        total = _sizes[root] = _sizes.get(root, 0) + size
    limit = config.cache_max_mb()
    if limit > 0 and total > limit * 2**20:
        trim_cache(root)


def trim_cache(root: Path | None = None) -> None:
    """Evict the least recently used build folders (by their manifest's mtime, which each use
    touches) until the cache's total size is within TRIDENT_CACHE_MAX_MB; never a build this
    process uses (the runtime, every product it returned).  Runs at a process's first use of
    the cache, in a thread (a scan: about 55 us per build folder), and when what this process
    built since takes the cache past the limit."""
    limit = config.cache_max_mb()
    if limit <= 0:
        return
    root = cache_root() if root is None else root
    budget = limit * 2**20
    total, folders = 0, []
    for kind in KINDS:
        try:
            entries = list(os.scandir(root / kind))
        except OSError:
            continue
        for e in entries:
            if e.name.startswith(".") or not e.is_dir(follow_symlinks=False):
                continue
            size, used = _usage(e)
            total += size
            folders.append((used, size, Path(e.path)))
    if total > budget:
        with _state:
            keep = set(_in_use)
        for _, size, path in sorted(folders):
            if total <= budget:
                break
            if path not in keep and _discard(path):
                total -= size
    with _state:
        _sizes[root] = total


def _usage(folder: os.DirEntry) -> tuple[int, float]:
    """A build folder's size in bytes and when it was last used."""
    size, used = 0, None
    try:
        for f in os.scandir(folder.path):
            st = f.stat(follow_symlinks=False)
            size += st.st_size
            if f.name == MANIFEST:
                used = st.st_mtime
        if used is None:
            used = folder.stat(follow_symlinks=False).st_mtime
    except OSError:
        used = 0.0 if used is None else used
    return size, used


def runtime_module():
    """Build (once per torch version) and import the C++ runtime `_trident_rt`.

    Its build is found by a hash of its sources and of its command (`_build`); the command
    comes from `torch.utils.cpp_extension`, whose import (setuptools with it) costs a new
    process 0.1-0.3 s.  So a process that found the build records its hash under a stamp of
    what the command depends on (`_runtime_stamp`), in a product of the cache
    (`runtime/index-<stamp>/tag.txt`, verified as any); a later process with the same stamp
    loads the build without that import."""
    global _runtime
    if _runtime is not None:
        return _runtime
    with _lock:
        if _runtime is not None:
            return _runtime
        files = {n: (RUNTIME_DIR / n).read_text() for n in RUNTIME_SOURCES}
        stamp = _runtime_stamp(files)
        so = _indexed_runtime(stamp)
        if so is None:
            so = _build_runtime(files)
            _index_runtime(stamp, so)
        spec = importlib.util.spec_from_file_location("_trident_rt", so)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        _runtime = mod
        return mod


_RUNTIME_PRODUCT = "trident_rt.so"
_INDEX = "tag.txt"


def _runtime_stamp(files: dict) -> str:
    """A digest of what the runtime's build command and sources depend on, found without
    importing cpp_extension: the sources, Python (its include folder), torch (version,
    folder, C++ ABI, CUDA), the compiler setting, the variables cpp_extension finds CUDA by,
    PATH (`c++` and `nvcc` are looked up there) and where Triton is (its cuda.h)."""
    import torch

    triton = importlib.util.find_spec("triton")
    return _digest("runtime-index 2", *files.values(), sys.version,
                   _python_include(),
                   torch.__version__, torch.__file__, str(torch.version.cuda),
                   str(int(torch._C._GLIBCXX_USE_CXX11_ABI)), config.cxx_compiler(),
                   *(os.environ.get(k, "") for k in ("CUDA_HOME", "CUDA_PATH", "PATH")),
                   str(triton.origin if triton else None))


def _indexed_runtime(stamp: str) -> Path | None:
    """The runtime build an earlier process recorded under `stamp`, if it verifies."""
    folder = cache_root() / "runtime" / f"index-{stamp}"
    if not os.path.lexists(folder):
        return None
    data, why = read_verified(folder, _INDEX)
    tag = data.decode("ascii", "replace").strip() if data is not None else ""
    if why is not None or len(tag) != 20 or not all(c in "0123456789abcdef" for c in tag):
        _discard(folder)  # rewritten once the runtime is found the long way
        return None
    out_dir = cache_root() / "runtime" / tag
    product = out_dir / _RUNTIME_PRODUCT
    with _state:
        _in_use.add(out_dir)
    if not os.path.lexists(out_dir) or _problem(out_dir, product) is not None:
        return None  # evicted or changed: `_build` says why, and builds it again
    _touch(out_dir / MANIFEST)
    return product


def _index_runtime(stamp: str, so: Path) -> None:
    """Record the build `so` under `stamp` (never raises: the index only saves time)."""
    if so.name != _RUNTIME_PRODUCT or so.parent.parent != cache_root() / "runtime":
        return  # a build from a private folder (`_build` lost its races): not indexed
    name = f"index-{stamp}"
    try:
        with contextlib.suppress(FileNotFoundError):
            old = cache_root() / "runtime" / name
            if os.path.lexists(old):
                _discard(old)  # it named another build
        store("runtime", name, _INDEX, so.parent.name.encode())
    except (OSError, BuildError):  # FileExistsError: another process wrote it meanwhile
        _log.debug("trident: indexing the runtime build failed", exc_info=True)


def _build_runtime(files: dict) -> Path:
    """Find (verified) or build the runtime's shared object."""
    import torch
    from torch.utils import cpp_extension

    incs = cpp_extension.include_paths()
    libdir = os.path.join(os.path.dirname(cpp_extension.__file__), "..", "lib")
    libdir = os.path.normpath(libdir)
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    cuda = _cuda_flags()

    def cmd_for(srcs: list, out: str) -> list[list[str]]:
        # One compile per source, run in parallel (the runtime's units take 5-20 s each),
        # then the link.
        cxx = config.cxx_compiler()
        flags = ["-fPIC", "-O2", "-std=c++20", "-fvisibility=hidden",
                 f"-D_GLIBCXX_USE_CXX11_ABI={abi}", "-DTORCH_EXTENSION_NAME=_trident_rt",
                 f"-I{_python_include()}",
                 *[f"-I{i}" for i in incs], *cuda["cflags"]]
        objs = [f"{src}.o" for src in srcs]
        return [*([cxx, *flags, "-c", src, "-o", obj] for src, obj in zip(srcs, objs)),
                [cxx, "-shared", *objs, "-o", out, f"-L{libdir}", "-lc10", "-ltorch",
                 "-ltorch_cpu", "-ltorch_python", *cuda["libs"], f"-Wl,-rpath,{libdir}"]]

    so, _ = _build("runtime", files, cmd_for, "building Trident's runtime")
    return so


def _cuda_flags() -> dict:
    """Compile the Triton launch path only where torch has CUDA."""
    import torch

    if not torch.version.cuda:
        return {"cflags": [], "libs": []}
    from torch.utils import cpp_extension

    incs = []
    home = cpp_extension.CUDA_HOME
    if home:
        incs.append(os.path.join(home, "include"))
    try:  # Triton ships cuda.h; use it when no toolkit headers are found
        import triton

        incs.append(os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia",
                                 "include"))
    except ImportError:
        pass
    return {"cflags": ["-DTRT_WITH_CUDA", *[f"-I{i}" for i in incs]], "libs": ["-lc10_cuda"]}


@frozen
class SCMBuild(Frozen):
    """A built SCM: its shared object, the objects linked into it (one per
    version, in order, then scm_main.o) and the units this build compiled
    (the others' objects came from the cache); `dispatcher` is its dispatcher's object;
    `provisional`: the version units linked at -O0 below their level (a quick build)."""

    so: Path
    objects: tuple
    compiled: tuple
    compile_s: float = 0.0  # seconds in the version units (compiled or found in the cache)
    link_s: float = 0.0  # seconds in the dispatcher unit and the link
    dispatcher: Path | None = None
    provisional: tuple = ()


_SCM_HEADERS = ("scm_prelude.h", "scm_dispatch.h", "trident_rt.h")


# Version units are compiled at -O1 by default (TRIDENT_VERSION_OPT, `config.version_opt()`):
# a FlagGems wrapper's unit is one function of a hundred
# guard blocks (60 KB of C), which gcc 13 compiled in 2.7 s at -O2 on the H200 machine (3.2 s
# at -O2 and 1.1 s at -O1 on the 2-core CI machine), and its hot path is calls, loads and
# compares that -O2 does not make faster.
# scm_main.c (compiled once per cache) and the small dispatcher unit stay at -O2.
# A unit larger than this (a whole model's forward: hundreds of operator calls in one function)
# is compiled at -O0: gcc's register allocation over such a function is what takes the time
# (a 2-layer Qwen3 forward, 345 KB of C: 16 s at -O1, 1.1 s at -O0 on the 2-core machine),
# while each of its operator calls costs microseconds that -O1 would not shorten.
LARGE_UNIT_CHARS = 150_000


def version_opt(text: str) -> str:
    return config.version_opt() if len(text) <= LARGE_UNIT_CHARS else "-O0"


# A quick build (`build_scm(quick=True)`, the miss's own build under TRIDENT_TIER_UP) links
# each version unit's object at its level where the cache has it, and otherwise compiles the
# unit at -O0: on the H100 machine a FlagGems pointwise wrapper's unit (50 KB of C, with the
# precompiled prelude) took 43-45 ms at -O0 against 65-71 ms at -O1, while its calls cost
# 2-3% more host time at -O0 (benchmarks/results/latest/unit_opt_ab_cuda.md).  The SCM then
# builds again at full level in a thread (SCM._tier_up), from the same source.


# -- the precompiled prelude -----------------------------------------------------------------
#
# A version unit's compile spends about half its time (40 of 90 ms on the 2-core machine)
# reading scm_prelude.h, which includes Python.h: 19,000 lines before the unit's own.  With
# gcc, the prelude is precompiled once per cache (`obj/<hash>/scm_prelude.h.gch`, about
# 12 MB per optimisation level, verified like any product) and each version unit is given
# `-include <that folder>/scm_prelude.h`, so gcc loads the .gch in place of the text (the
# unit's own `#include "scm_prelude.h"` is then skipped by its include guard).  The object is
# the same, so the unit's hash does not cover the flag: a unit compiled with or without the
# .gch has one cache entry.  gcc ignores a .gch that does not fit the command and reads the
# header beside it; a compile that fails with the flag (the folder evicted meanwhile) runs
# again without it.  Other compilers, and a cache limited under PCH_MIN_CACHE_MB, compile
# without it.

_pch_state: dict = {}
# A cache limited to less (TRIDENT_CACHE_MAX_MB) compiles without the 12 MB .gch.
PCH_MIN_CACHE_MB = 64


@functools.lru_cache(maxsize=None)
def _gcc_version(cc: str) -> str | None:
    """`__VERSION__` of `cc` if it is gcc (not clang, which reads another PCH format)."""
    try:
        out = subprocess.run([cc, "-dM", "-E", "-x", "c", os.devnull], capture_output=True,
                             text=True, check=False, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    if "__clang__" in out or "__GNUC__" not in out:
        return None
    return next((ln for ln in out.splitlines() if ln.startswith("#define __VERSION__")), "gcc")


def _prelude_pch(opt: str) -> list[str]:
    """The arguments that make a version unit compiled at `opt` use the precompiled prelude
    (building it once per cache), or [] where there is none: not gcc, or its build failed
    (then not tried again in this process)."""
    cc = config.c_compiler()
    limit = config.cache_max_mb()
    small = 0 < limit < PCH_MIN_CACHE_MB  # the .gch would take much of it
    key = (cc, opt, cache_root(), small)
    with _state:
        if key in _pch_state:
            return _pch_state[key]
    version = _gcc_version(cc) if opt in ("-O0", config.version_opt()) and not small else None
    args: list[str] = []
    if version is not None:
        unit_cmd = _scm_cmd("-x", "c-header", opt=opt)

        def cmd_for(srcs: list, out: str) -> list[str]:
            return unit_cmd([out.removesuffix(".gch")], out)

        files = _with_headers("scm_prelude.h", _header("scm_prelude.h"),
                              ("scm_dispatch.h", "trident_rt.h"))
        files["compiler.txt"] = version + "\n"  # a new gcc reads no older .gch: a new hash
        try:
            gch, _ = _build("obj", files, cmd_for, "precompiling scm_prelude.h",
                            suffix=".h.gch")
            args = ["-include", str(gch.with_suffix(""))]
        except BuildError as e:
            _log.warning("trident: %s; version units are compiled without it", e)
    with _state:
        _pch_state[key] = args
    return args


def _scm_cmd(*head: str, opt: str = "-O2"):
    """The command line of an SCM step; `head` says what it makes."""

    def cmd_for(srcs: list, out: str, tail: tuple = ()) -> list[str]:
        return [
            config.c_compiler(), *head, "-fPIC", opt, "-std=c11", "-ffp-contract=off",
            "-fvisibility=hidden", "-Wall", "-Wno-unused-variable", "-Wno-unused-label",
            "-Wno-unused-function",
            f"-I{_python_include()}", *srcs, *tail, "-o", out,
        ]

    return cmd_for


def _with_headers(name: str, text: str, headers=_SCM_HEADERS) -> dict:
    # The headers travel with the source: the build directory is self-contained
    # and its hash changes when they do.
    files = {name: text}
    for n in headers:
        files[n] = _header(n)
    return files


@functools.lru_cache(maxsize=None)
def _header(name: str) -> str:
    """A runtime header's text, read once per process (a rebuild hashes every version's unit
    with the headers: 3 file reads per version per miss otherwise)."""
    return (RUNTIME_DIR / name).read_text()


# A rebuild links every version's object into the new SCM, so the link grew with the versions
# (0.12-0.19 s for 156 objects on the busy 2-core machine).  The objects of each full block
# of LINK_BLOCK versions are first combined into one relocatable object (`cc -r`: hidden
# symbols stay hidden), built once and cached by the list of its members (their folders are
# content hashes), so a link reads at most N / LINK_BLOCK + LINK_BLOCK + 1 objects.
LINK_BLOCK = 32


def _link_inputs(objects: list) -> list:
    """What the link reads for `objects` (the versions' objects, then scm_main.o): each full
    block of LINK_BLOCK versions as one combined object, the rest as they are."""
    versions, tail = objects[:-1], objects[-1:]
    full = len(versions) // LINK_BLOCK * LINK_BLOCK
    out = []
    for b in range(0, full, LINK_BLOCK):
        members = [str(o) for o in versions[b:b + LINK_BLOCK]]

        def cmd_for(srcs: list, out_path: str, members=members) -> list[str]:
            return [config.c_compiler(), "-r", "-nostdlib", *members, "-o", out_path]

        block, _ = _build("obj", {"block.txt": "\n".join(members) + "\n"}, cmd_for,
                          "combining the objects of an SCM's versions", suffix=".o")
        out.append(block)
    return out + list(versions[full:]) + list(tail)


def build_scm(src, quick: bool = False, cancelled=None) -> SCMBuild | None:
    """Build one generated SCM (plain C; a `codegen.c.SCMSource`).

    Each version's unit is compiled to an object unless an object of the
    same text exists (so a rebuild after a miss compiles only the new
    version), and so is runtime/scm_main.c (the entry points; once per
    cache); the dispatcher unit, which does not include Python.h and does
    not depend on the versions' objects, is compiled to an object meanwhile,
    in another thread; then all are linked into the shared object.
    `quick`: a unit whose object at its level is not cached is compiled at -O0 (and named in
    `SCMBuild.provisional`).  `cancelled`: called before the link; if it returns true, the
    build stops there and returns None (a full-level rebuild whose SCM was superseded)."""
    from concurrent.futures import ThreadPoolExecutor

    t0 = time.perf_counter()
    compiled = []
    objects = []
    provisional: list[str] = []
    units = [(u.name, u.text) for u in src.versions]
    units.append(("scm_main.c", (RUNTIME_DIR / "scm_main.c").read_text()))
    d = src.dispatcher
    dfiles = _with_headers(d.name, d.text, ("scm_dispatch.h",))

    def dispatcher():
        return _build("obj", dfiles, _scm_cmd("-c", opt="-O2"),
                      "compiling an SCM's dispatcher", suffix=".o")

    with ThreadPoolExecutor(max_workers=1) as ex:
        pending = _submit(ex, dispatcher)
        try:
            for name, text in units:
                opt = "-O2" if name == "scm_main.c" else version_opt(text)
                files = _with_headers(name, text)
                obj = None
                if quick and opt != "-O0" and name != "scm_main.c":
                    obj, _ = _build("obj", files, _scm_cmd("-c", opt=opt), "", suffix=".o",
                                    cached_only=True)
                    if obj is None:
                        opt = "-O0"
                        provisional.append(name)
                if obj is None:
                    obj, fresh = _build("obj", files, _scm_cmd("-c", opt=opt),
                                        f"compiling {name} of an SCM", suffix=".o",
                                        speedup=functools.partial(_prelude_pch, opt))
                    if fresh:
                        compiled.append(name)
                objects.append(obj)
        finally:
            t1 = time.perf_counter()
            dobj, dfresh = pending.result()  # its BuildError, if any, is raised here
    if cancelled is not None and cancelled():
        return None
    link = _scm_cmd("-shared")
    for attempt in (0, 1):
        inputs = (str(dobj), *(str(o) for o in _link_inputs(objects)))

        def cmd_for(srcs: list, out: str, inputs=inputs) -> list[str]:
            # the dispatcher's source stays beside, for reading; libm: sqrt, pow
            return link([], out, (*inputs, "-lm"))

        try:
            so, linked = _build("scm", dfiles, cmd_for, "linking an SCM",
                                speedup=_fast_linker)
            break
        except BuildError:
            # Another process superseded this SCM and removed the dispatcher's object
            # between its verification and the link (discard_scm): build it once more.
            if attempt or os.path.exists(dobj):
                raise
            dobj, fresh = dispatcher()
            dfresh = dfresh or fresh
    if dfresh or linked:  # the dispatcher unit was compiled, or linked anew
        compiled.append(d.name)
    return SCMBuild(so, tuple(objects), tuple(compiled), t1 - t0, time.perf_counter() - t1,
                    dobj, tuple(provisional))


# The system linker (GNU ld.bfd) takes about a third of a small SCM's link; gold or lld, where
# installed, link the same objects into the same library faster.  As a `_build` speedup, the
# hash does not cover it, and a link that fails with it runs again without it.
_LINKERS = ("lld", "gold")


@functools.lru_cache(maxsize=None)
def _fast_linker_for(cc: str) -> tuple[str, ...]:
    for name in _LINKERS:
        if shutil.which(f"ld.{name}"):
            return (f"-fuse-ld={name}",)
    return ()


def _fast_linker() -> list[str]:
    return list(_fast_linker_for(config.c_compiler()))
