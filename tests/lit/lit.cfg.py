# -*- Python -*-
# lit configuration for Braid's FileCheck tests.

import os

import lit.formats
from lit.llvm import llvm_config

config.name = "Braid"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
# Inputs/ folders hold files that tests read; they are not tests.
config.excludes = ["Inputs", "lit.cfg.py", "lit.site.cfg.py"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = config.braid_obj_root

config.substitutions.append(("%inputs", os.path.join(config.test_source_root, "Inputs")))
config.substitutions.append(("%braid_src", config.braid_src_root))
# mpirun for ranks on this machine, whatever its cores (as tests/e2e does).
mpirun = "mpirun --oversubscribe --bind-to none"
if os.geteuid() == 0:
    mpirun += " --allow-run-as-root"
config.substitutions.append(("%mpirun", mpirun))

# cuda-backend: the tools were built with the CUDA backend; gpu: this machine
# has an NVIDIA device node (the CUDA tests themselves carry the ctest label
# gpu and skip without one).
if config.braid_enable_cuda.upper() in ("ON", "TRUE", "1", "YES"):
    config.available_features.add("cuda-backend")
if os.path.exists("/dev/nvidia0"):
    config.available_features.add("gpu")
# root: tests that mount a small tmpfs (a file system without room).
if os.geteuid() == 0:
    config.available_features.add("root")

llvm_config.with_system_environment(["HOME", "TMPDIR"])
llvm_config.use_default_substitutions()
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
llvm_config.with_environment("PATH", config.braid_tools_dir, append_path=True)
