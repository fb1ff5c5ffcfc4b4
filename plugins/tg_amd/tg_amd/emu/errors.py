"""The emulator's error types: each message names what went wrong and what to do about it."""

class AMDEmuError(RuntimeError):
  """Base of every error the AMDGPU emulator raises."""

class AMDCodeObjectError(AMDEmuError, ValueError):
  """The bytes are not an AMDGPU code object the emulator can load (not ELF, wrong machine, missing kernel descriptor...)."""

class AMDEmuUnsupportedError(AMDEmuError, NotImplementedError):
  """An instruction (or an encoding feature of one) the emulator does not implement; raised instead of computing a wrong value."""
  def __init__(self, what: str, pc: int, words: tuple[int, ...]):
    enc = " ".join(f"{w:08X}" for w in words)
    super().__init__(f"AMD emulator: unsupported {what} at pc 0x{pc:x} (encoding {enc}); implement it in tg_amd/emu or avoid the construct")
    self.what, self.pc, self.words = what, pc, words

class AMDEmuMemoryFault(AMDEmuError):
  """A kernel touched memory that no allocation covers (or ran past its code); the address is in the message."""
