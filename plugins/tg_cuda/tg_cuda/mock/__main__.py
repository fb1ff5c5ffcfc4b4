"""`python -m tg_cuda.mock FILE.ptx ...`: loads each PTX module the way MOCK+CUDA would and reports its kernels, or the
first construct the interpreter does not support (exit status 1)."""
import sys
from collections import Counter

from tg_cuda.mock.errors import PTXError
from tg_cuda.mock.memory import DeviceMemory
from tg_cuda.mock.ptx_interp import load_module
from tg_cuda.mock.ptx_parser import parse_ptx


def main(paths: list[str]) -> int:
  if not paths:
    print(__doc__)
    return 2
  status = 0
  for path in paths:
    with open(path) as f: text = f.read()
    try: kernels, _ = load_module(parse_ptx(text), DeviceMemory())
    except PTXError as e:
      print(f"{path}: {type(e).__name__}: {e}")
      status = 1
      continue
    for name, ck in kernels.items():
      k = ck.kernel
      ops = Counter(ins.op for ins in k.instrs)
      print(f"{path}: {name}: {len(k.instrs)} instructions, {len(k.reg_types)} registers, {k.shared_size} B shared, {k.local_size} B local; "
            + ", ".join(f"{op} {n}" for op, n in ops.most_common(8)))
  return status


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
