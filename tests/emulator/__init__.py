"""CPU emulator for jitmeta's rendered CUDA kernels (see core.py and cuda_shim.h)."""

from .core import (Case, Emulator, EmulatorError, Launch, compiler, emulate, emulate_cases,
                   emulate_many, get_emulator, kernel_names_in, prebuild, prepare_source,
                   recorded_launches, render)

__all__ = ["Case", "Emulator", "EmulatorError", "Launch", "compiler", "emulate",
           "emulate_cases", "emulate_many", "get_emulator", "kernel_names_in", "prebuild",
           "prepare_source", "recorded_launches", "render"]
