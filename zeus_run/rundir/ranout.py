"""What ran out when a write or a start failed: the resource, named, and what to do about it (issue 54, 8).

A process out of file descriptors (``EMFILE``), memory, processes or disk is not a damaged run directory nor a
bad job: the same command works once the resource is back, and the message says which one ran out (``ulimit -n``
for file descriptors), not "free disk space or fix permissions".
"""

from __future__ import annotations

import errno

#: What to do about a write that failed for want of a resource, by errno (else: disk space or permissions).
_RESOURCE_FIXES = {
    errno.EMFILE: "this process ran out of file descriptors: raise the open-file limit (ulimit -n)",
    errno.ENFILE: "the system ran out of open files: close other programs, or raise fs.file-max",
    errno.ENOMEM: "the machine ran out of memory: free memory",
    errno.ENOSPC: "the disk is full: free disk space",
    errno.EDQUOT: "the disk quota is used up: free space",
    errno.EACCES: "fix the permissions",
    errno.EPERM: "fix the permissions",
    errno.EROFS: "the file system is read-only: choose another run directory",
}


def resource_fix(exc: OSError) -> str:
    """What ran out (or is wrong) when a write failed with ``exc``, and what to do about it."""
    return _RESOURCE_FIXES.get(exc.errno or 0, "free disk space or fix permissions")


#: Errors of this machine running out of something (file descriptors, memory, processes, disk): nothing is wrong
#: with the run directory or the job, and the same command runs once the resource is back.
RAN_OUT = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.EAGAIN, errno.ENOSPC, errno.EDQUOT})


def ran_out(exc: BaseException) -> OSError | None:
    """The `OSError` of a resource that ran out (`RAN_OUT`) behind ``exc`` (itself, or the cause of a
    `RunDirError`), else None."""
    for e in (exc, exc.__cause__):
        if isinstance(e, OSError) and e.errno in RAN_OUT:
            return e
    return None
