"""Holds the advisory lock (flock) of FILE, with HOLDER written in it as a
checkpoint root's lock records its holder, while it runs COMMAND; exits with
COMMAND's status.

    hold-lock.py FILE HOLDER COMMAND...
"""
import fcntl
import subprocess
import sys

path, holder, command = sys.argv[1], sys.argv[2], sys.argv[3:]
with open(path, "w") as f:
    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    f.write(holder + "\n")
    f.flush()
    sys.exit(subprocess.run(command).returncode)
