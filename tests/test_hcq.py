"""tg_core.hcq, device-independent: a signal in host memory advanced by a toy queue, the timeout error, the kernarg layout."""
from __future__ import annotations
import struct
import threading
from typing import Self
import pytest
from tg_core.hcq import HCQCompiled, HCQQueueError, HCQSignal, HCQTimeoutError, HWQueue, KernargLayout

class MemSignal(HCQSignal):
  def __init__(self, name: str):
    super().__init__(name)
    self.mem = bytearray(8)
  def _read(self) -> int: return struct.unpack_from("<Q", self.mem)[0]
  def _write(self, value: int) -> None: struct.pack_into("<Q", self.mem, 0, value)

class ToyDevice(HCQCompiled):
  """Executes a queue's packets in order: b"S" + (signal index, value) sets a signal."""
  def __init__(self) -> None:
    self.signals = [MemSignal("timeline"), MemSignal("other")]
    self.timeline_signal = self.signals[0]

class ToyQueue(HWQueue[ToyDevice]):
  def signal(self, sig: HCQSignal, value: int) -> Self: return self._add(b"S" + struct.pack("<BQ", int(sig.name != "timeline"), value))
  def wait(self, sig: HCQSignal, value: int) -> Self: return self._add(b"W" + struct.pack("<BQ", int(sig.name != "timeline"), value))
  def _submit(self, dev: ToyDevice) -> None:
    for p in self.packets:
      i, v = struct.unpack_from("<BQ", p, 1)
      if p[:1] == b"S": dev.signals[i].value = v

def test_queue_records_then_submits_and_timeline_waits():
  dev = ToyDevice()
  q = ToyQueue().signal(dev.timeline_signal, dev.next_timeline())
  assert len(q.packets) == 1 and dev.timeline_signal.value == 0  # recorded, not yet run
  q.submit(dev)
  dev.synchronize(timeout_s=0.5)
  assert dev.timeline_signal.value == 1

def test_wait_returns_when_another_thread_advances_the_signal():
  sig = MemSignal("s")
  t = threading.Timer(0.02, lambda: setattr(sig, "value", 2))
  t.start()
  sig.wait(2, timeout_s=5.0)
  t.join()

def test_wait_times_out_naming_signal_wanted_and_seen():
  sig = MemSignal("s0")
  sig.value = 4
  with pytest.raises(HCQTimeoutError, match=r"signal s0 to reach 5; it holds 4") as e:
    sig.wait(5, timeout_s=0.02)
  assert (e.value.signal, e.value.wanted, e.value.seen) == ("s0", 5, 4) and isinstance(e.value, TimeoutError)

def test_queue_without_copy_or_exec_says_which_queue_to_use():
  with pytest.raises(NotImplementedError, match="copy queue"): ToyQueue().copy(0, 0, 4)
  with pytest.raises(NotImplementedError, match="compute queue"): ToyQueue().exec(None, 0, (1, 1, 1), (1, 1, 1))

def test_kernarg_layout_packs_buffers_then_values():
  lay = KernargLayout(2, 1, 64)
  assert lay.pack((0x1122334455667788, 8), (-1,)) == struct.pack("<QQI", 0x1122334455667788, 8, 0xffffffff)
  with pytest.raises(HCQQueueError, match="takes 2 buffers and 1 values, got 1 and 1"): lay.pack((1,), (2,))
  with pytest.raises(HCQQueueError, match="can't hold 3 buffers"): KernargLayout(3, 0, 16)
