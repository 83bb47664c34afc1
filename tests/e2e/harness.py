"""What the end-to-end scripts share: running tools, mpirun, the command
line (--bin, --work, --corpus) and a byte-tokenized dataset from the corpus.
"""

import argparse
import json
import os
import struct
import subprocess
import sys


def run(cmd, **kw):
    """Runs `cmd`; on failure exits with FAILED, the command and its output."""
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        sys.exit(f"FAILED: {' '.join(cmd)}\n{p.stdout}\n{p.stderr}")
    return p


def mpirun(n):
    """The mpirun prefix for n ranks on this machine, whatever its cores."""
    cmd = ["mpirun", "-np", str(n), "--oversubscribe", "--bind-to", "none"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    return cmd


class Setup:
    """Parses --bin, --work, --corpus (and the script's own options, which
    `add_options` adds to the parser); `b(tool)` is a binary, `w(name)` a
    file in the work directory."""

    def __init__(self, add_options=None):
        ap = argparse.ArgumentParser()
        ap.add_argument("--bin", required=True)
        ap.add_argument("--work", required=True)
        ap.add_argument("--corpus", required=True)
        if add_options:
            add_options(ap)
        self.args = ap.parse_args()
        os.makedirs(self.args.work, exist_ok=True)

    def b(self, tool):
        return os.path.join(self.args.bin, tool)

    def w(self, name):
        return os.path.join(self.args.work, name)

    def dataset(self, size, split_lines=False):
        """The first `size` bytes of the corpus, preprocessed with bytes as
        tokens (one document, or one per non-blank line with `split_lines`);
        returns the dataset prefix."""
        with open(self.args.corpus, "rb") as f:
            text = f.read(size)
        with open(self.w("corpus.txt"), "wb") as f:
            f.write(text)
        run([self.b("braid-data"), "preprocess", "--input", self.w("corpus.txt"),
             "--output-prefix", self.w("data")] +
            (["--split-lines", "--append-eod"] if split_lines else []))
        return self.w("data")


def read_safetensors(path):
    """name -> list of floats (F32 only), read from the published layout."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", (name, info["dtype"])
        begin, end = info["data_offsets"]
        out[name] = struct.unpack(f"<{(end - begin) // 4}f", data[base + begin : base + end])
    return out
