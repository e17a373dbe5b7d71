"""Limits the worker process puts on itself before it imports the student's code.

:func:`confine` applies, in this order, what the machine allows and returns one line per
measure saying whether it applied (the grader prints them with ``--verbose`` and
``labs/INSTRUCTORS.md`` explains them):

1. resource limits: address space for data (``RLIMIT_DATA``), CPU seconds, the size of a
   file written, no core files;
2. no network: a network namespace of its own (:func:`_no_network`; without root, inside
   a user namespace, where the kernel allows them); and a PID namespace of its own
   (:func:`_own_processes`): the worker forks into it as its first process, so that
   when it ends, by itself or killed, the kernel ends every process it started, however
   often they re-fork or whichever session they move to;
3. Landlock (Linux >= 5.13, unprivileged): the process may read only Python's own files,
   the installed packages and pagedsim's modules that the lab does not forbid, and write
   only in its own folder; no TCP (Landlock ABI >= 4); no signals to, nor ptrace of,
   processes outside it (ABI >= 6 for signals). The labs folder (the reference solutions),
   the grading folder and the results are outside what it may open;
4. when run as root (Gradescope runs the autograder so): the process becomes an
   unprivileged user (``$PAGEDSIM_LABS_USER``, default ``nobody``), so that it cannot
   write the results nor read files only root may read; skipped, and said so, when no such
   user exists or Python's own files are not readable by it.

Root that stays root without Landlock confines nothing that matters: with its
capabilities it reads any process's memory and original environment block through
``/proc`` (non-dumpable does not stop root), ptraces the graders and writes pagedsim's own
files. :func:`unconfinable` says so before grading a submission (grading then refuses with
that line), and :func:`confine` raises :class:`Unconfined` in the worker itself should it
find itself so, before any of the student's code is imported.
"""

from __future__ import annotations

import ctypes
import os
import pwd
import resource
import stat
import sys
from pathlib import Path

USER_ENV = "PAGEDSIM_LABS_USER"
#: Set to 1 to treat this kernel as one without Landlock: the tests simulate such a kernel
#: so, and an instructor can see what grading would do on one.
NO_LANDLOCK_ENV = "PAGEDSIM_LABS_NO_LANDLOCK"
_FS_V1 = (1 << 13) - 1  # EXECUTE ... MAKE_SYM
_READ_FILE = (1 << 0) | (1 << 2)  # EXECUTE | READ_FILE
_READ_DIR = _READ_FILE | (1 << 3)  # ... | READ_DIR
_WRITE_FILE = 1 << 1
_SYS_CREATE, _SYS_ADD_RULE, _SYS_RESTRICT = 444, 445, 446  # the same on x86-64 and arm64
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_PDEATHSIG = 1
_CLONE_NEWUSER, _CLONE_NEWNET, _CLONE_NEWPID = 0x10000000, 0x40000000, 0x20000000


class Unconfined(RuntimeError):
    """The worker runs as root, could not become an unprivileged user and has no Landlock:
    nothing keeps the graded code from the graders (its message: one line saying why)."""


def landlock_abi() -> int:
    """The kernel's Landlock ABI version (>= 1), or -1 where there is none (not Linux, an
    older kernel, a seccomp filter refusing the call, or ``$PAGEDSIM_LABS_NO_LANDLOCK``)."""
    if not sys.platform.startswith("linux") or os.environ.get(NO_LANDLOCK_ENV, "") not in (
            "", "0"):
        return -1
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.syscall(_SYS_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(1)))
    except (OSError, AttributeError):
        return -1


def unconfinable() -> str:
    """Why a worker started from this process could not be kept from the graders ("" if it
    can): root that can become no unprivileged user, on a kernel without Landlock."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return ""  # another user: the graders' processes are non-dumpable (signing.py)
    user = _user_to_become()
    if isinstance(user, pwd.struct_passwd) or landlock_abi() >= 1:
        return ""
    return (f"refusing to grade: {user.split(': stays root')[0]}, and this kernel has no "
            "Landlock, so the graded code would run as root and could read the graders' key "
            "and results path through /proc or ptrace them; install Python where every user "
            f"can read it, set ${USER_ENV} to a user that can, or use a kernel with Landlock")


def confine(workdir: Path, memory_bytes: int, cpu_s: int, forbidden: tuple[str, ...],
            file_bytes: int = 64 * 2**20, refuse_unconfined: bool = False) -> list[str]:
    """Confine this process (see the module docstring); one line per measure.

    With ``refuse_unconfined`` (a student's code is next), raise :class:`Unconfined` when
    the process stays root without Landlock."""
    notes = [_limits(memory_bytes, cpu_s, file_bytes)]
    user = _user_to_become()
    if isinstance(user, pwd.struct_passwd):
        os.chown(workdir, user.pw_uid, user.pw_gid)
    notes.append(_no_network())  # before Landlock, which would refuse /proc/self/uid_map
    notes.append(_own_processes())  # a fork: what follows applies to the namespace's first
    notes.append(_landlock(workdir, forbidden))
    if refuse_unconfined and not isinstance(user, pwd.struct_passwd) and os.geteuid() == 0 \
            and not notes[-1].startswith("Landlock ABI"):
        raise Unconfined(f"refusing to run the graded code: {user.split(': stays root')[0]}, "
                         f"and {notes[-1]}")
    if isinstance(user, pwd.struct_passwd):
        os.setgroups([])
        os.setgid(user.pw_gid)
        os.setuid(user.pw_uid)
        notes.append(f"runs as the unprivileged user {user.pw_name} (uid {user.pw_uid})")
    else:
        notes.append(user)
    _die_with_parent()
    return notes


def _no_network() -> str:
    """A network namespace of its own: no interface but a loopback that is down, so that
    nothing (TCP, UDP, DNS) leaves the process, even where Landlock is missing (or knows
    only TCP). As root that is one ``unshare``; without root, a user namespace with it
    (the same user inside, mapped to itself), where the kernel lets users make them."""
    if not sys.platform.startswith("linux"):
        return "network: not Linux, the worker may connect where its user may"
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        uid, gid = os.getuid(), os.getgid()
        flags = _CLONE_NEWNET | (_CLONE_NEWUSER if os.geteuid() != 0 else 0)
        if libc.unshare(ctypes.c_int(flags)) != 0:
            return (f"network: not cut off (unshare refused, errno {ctypes.get_errno()}), "
                    "the worker may connect where its user may")
    except (OSError, AttributeError):
        return "network: not cut off (no unshare), the worker may connect where its user may"
    if flags & _CLONE_NEWUSER:
        try:  # the same user inside (else it reads as nobody there; access is unchanged)
            for name, line in (("uid_map", f"{uid} {uid} 1"), ("setgroups", "deny"),
                               ("gid_map", f"{gid} {gid} 1")):
                with open(f"/proc/self/{name}", "wb") as f:
                    f.write(line.encode())
        except OSError as exc:
            return (f"network: none (user and network namespaces of its own; its user not "
                    f"mapped inside: {exc.strerror})")
        return "network: none (user and network namespaces of its own)"
    return "network: none (a network namespace of its own)"


def _own_processes() -> str:
    """Fork into a PID namespace of its own (the child returns; this process stays behind
    as a relay that waits for it and exits with its status). The child is the namespace's
    first process: when it ends, the kernel kills every process left in the namespace,
    which none of them can leave. As root directly; without root, inside the user
    namespace :func:`_no_network` made."""
    if not sys.platform.startswith("linux"):
        return "processes: not Linux, what the worker starts may outlive it"
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(ctypes.c_int(_CLONE_NEWPID)) != 0:
            return (f"processes: no PID namespace (unshare refused, errno "
                    f"{ctypes.get_errno()}), what the worker starts may outlive it")
    except (OSError, AttributeError):
        return "processes: no PID namespace (no unshare), what the worker starts may outlive it"
    child = os.fork()
    if child:
        _relay(child)
    return "processes: a PID namespace of its own, all of it ends with the worker"


def _relay(child: int) -> None:
    """The process left outside the namespace: it holds none of the worker's channels
    (else the grader would wait on a dead worker's pipe) and ends with it (never
    returns)."""
    _die_with_parent()  # the grader's process: its end ends this one, and so the namespace
    os.closerange(3, _max_fd())
    while True:
        try:
            _, status = os.waitpid(child, 0)
        except InterruptedError:
            continue
        except ChildProcessError:
            os._exit(1)
        os._exit(os.waitstatus_to_exitcode(status) % 256)


def _max_fd() -> int:
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return soft if 0 < soft < 2**20 else 2**20


def _limits(memory_bytes: int, cpu_s: int, file_bytes: int) -> str:
    refused = []
    for name, which, value in (("data", resource.RLIMIT_DATA, memory_bytes),
                               ("CPU", resource.RLIMIT_CPU, cpu_s),
                               ("file size", resource.RLIMIT_FSIZE, file_bytes),
                               ("core files", resource.RLIMIT_CORE, 0)):
        soft, hard = resource.getrlimit(which)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        try:
            resource.setrlimit(which, (value, value if hard == resource.RLIM_INFINITY
                                       else hard))
        except (ValueError, OSError):  # a system that refuses one (macOS: data)
            refused.append(name)
    return (f"limits: {memory_bytes / 2**30:g} GiB of data, {cpu_s} s of CPU, files up to "
            f"{file_bytes / 2**20:g} MiB" + (f" (refused here: {', '.join(refused)})"
                                             if refused else ""))


def _user_to_become() -> pwd.struct_passwd | str:
    """The user to switch to, or why none (a line)."""
    if os.geteuid() != 0:
        return "not run as root: runs as the calling user (no user switch)"
    name = os.environ.get(USER_ENV, "nobody")
    try:
        user = pwd.getpwnam(name)
    except KeyError:
        return f"run as root but no user {name!r} exists: stays root (set ${USER_ENV})"
    for path in (Path(sys.executable).resolve(), *map(Path, sys.path[1:])):
        if path.exists() and not _readable_by_others(path):
            return (f"run as root, but {path} is not readable by {name}: stays root "
                    "(install Python where every user can read it)")
    return user


def _readable_by_others(path: Path) -> bool:
    """Can a user who is neither the owner nor in the group read ``path``?"""
    mode = path.stat().st_mode
    if not mode & stat.S_IROTH:
        return False
    return all(p.stat().st_mode & stat.S_IXOTH for p in path.resolve().parents)


def _die_with_parent() -> None:
    """SIGKILL this process when the grader's process ends (set after the user switch,
    which clears it)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, 9, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux (macOS has no prctl)
        pass


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _landlock(workdir: Path, forbidden: tuple[str, ...]) -> str:
    if not sys.platform.startswith("linux"):
        return "Landlock: not Linux, the worker may read and write what its user may"
    abi = landlock_abi()
    libc = ctypes.CDLL(None, use_errno=True)
    if abi < 1:
        return ("Landlock: not available on this kernel, the worker may read and write "
                "what its user may")
    fs = _FS_V1 | (1 << 13 if abi >= 2 else 0) | (1 << 14 if abi >= 3 else 0) | (
        1 << 15 if abi >= 5 else 0)
    fields = [fs] + ([3] if abi >= 4 else []) + ([3] if abi >= 6 else [])
    attr = (ctypes.c_uint64 * len(fields))(*fields)
    ruleset = libc.syscall(_SYS_CREATE, ctypes.byref(attr), ctypes.c_size_t(len(fields) * 8),
                           ctypes.c_uint32(0))
    if ruleset < 0:
        return f"Landlock: ruleset refused (errno {ctypes.get_errno()}), not applied"
    try:
        for path, access in _rules(workdir, forbidden, fs):
            _add_rule(libc, ruleset, path, access & fs)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or libc.syscall(
                _SYS_RESTRICT, ruleset, ctypes.c_uint32(0)) != 0:
            return f"Landlock: not applied (errno {ctypes.get_errno()})"
    finally:
        os.close(ruleset)
    extra = (", no TCP" if abi >= 4 else "") + (", no signals out" if abi >= 6 else "")
    return (f"Landlock ABI {abi}: reads Python and the allowed modules only, writes its "
            f"folder only{extra}")


def _add_rule(libc: ctypes.CDLL, ruleset: int, path: Path, access: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            access &= _READ_FILE | _WRITE_FILE | (1 << 14) | (1 << 15)
        rule = _PathBeneath(access, fd)
        libc.syscall(_SYS_ADD_RULE, ruleset, 1, ctypes.byref(rule), ctypes.c_uint32(0))
    finally:
        os.close(fd)


def _rules(workdir: Path, forbidden: tuple[str, ...], fs: int) -> list[tuple[Path, int]]:
    """(path, access) pairs: everything under the worker's folder; reads of the system's
    libraries and of every import path, except pagedsim's forbidden modules and a source
    checkout's other folders (``labs/`` holds the reference solutions)."""
    rules: list[tuple[Path, int]] = [(workdir, fs)]
    rules += [(Path(p), _READ_DIR) for p in ("/usr", "/lib", "/lib64", "/etc")]
    rules += [(Path("/dev/null"), _READ_FILE | _WRITE_FILE), (Path("/dev/urandom"), _READ_FILE)]
    # A GPU (lab 6 on a CUDA machine): its device files, with ioctl, and the driver's info.
    rules += [(p, _READ_FILE | _WRITE_FILE | (1 << 15)) for p in sorted(Path("/dev").glob(
        "nvidia*"))]
    rules += [(Path(p), _READ_DIR) for p in ("/proc/driver/nvidia", "/sys")]
    # torch asks for the CPUs' description when it first runs an operation.
    rules += [(Path(p), _READ_DIR) for p in ("/proc/cpuinfo", "/proc/meminfo")]
    package = Path(__file__).resolve().parents[1]  # pagedsim/ (without importing it)
    for entry in sys.path:
        folder = Path(entry or ".").resolve()
        if not folder.is_dir() or folder == workdir or folder in package.parents[1:]:
            continue  # a folder above pagedsim's own would open all of it
        if folder == package.parent:  # site-packages holding pagedsim: all but pagedsim
            if not (folder / "pyproject.toml").is_file():  # (a checkout: nothing else)
                rules += [(p, _READ_DIR) for p in folder.iterdir() if p.name != package.name]
        elif package not in folder.parents and folder != package:
            rules.append((folder, _READ_DIR))
    rules += _package_rules(package, "pagedsim", forbidden)
    return rules


def _package_rules(folder: Path, dotted: str, forbidden: tuple[str, ...]
                   ) -> list[tuple[Path, int]]:
    """Read rules for the files of package ``dotted`` in ``folder``, module by module,
    leaving out the forbidden ones (and their submodules)."""
    rules: list[tuple[Path, int]] = [(folder, 1 << 3)]  # list it; read no file beneath
    for path in sorted(folder.iterdir()):
        name = f"{dotted}.{path.stem if path.is_file() else path.name}"
        if any(name == f or name.startswith(f + ".") for f in forbidden):
            continue
        if path.is_dir() and (path / "__init__.py").is_file():
            rules += _package_rules(path, name, forbidden)
        elif path.is_file() and path.suffix == ".py":
            rules.append((path, _READ_FILE))
    return rules
