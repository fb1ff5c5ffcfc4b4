"""tg-cpu-x86: the CPU device of tg. Kernels are rendered to LLVM IR, compiled in-process with llvmlite's LLVM (no C
compiler needed) and run on a thread pool that splits the outermost output loop across cores."""
__version__ = "0.1.0"
