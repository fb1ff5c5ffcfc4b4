"""GPU nodes from the KFD sysfs topology (/sys/devices/virtual/kfd/kfd/topology/nodes/<n>/{gpu_id,properties})."""
from __future__ import annotations
from dataclasses import dataclass
from tg_amd.kfd.errors import KFDTopologyError
from tg_amd.kfd.seam import OSInterface

TOPOLOGY = "/sys/devices/virtual/kfd/kfd/topology/nodes"

@dataclass(frozen=True)
class KFDNode:
  index: int  # the node's directory number
  gpu_id: int
  properties: dict[str, int]

  @property
  def arch(self) -> str:
    """gfx_target_version is major*10000 + minor*100 + stepping; the gfx name writes minor and stepping as hex digits (90402 -> gfx942)."""
    v = self.properties["gfx_target_version"]
    return f"gfx{v // 10000}{v // 100 % 100:x}{v % 100:x}"
  @property
  def drm_render_minor(self) -> int: return self.properties["drm_render_minor"]

def gpu_nodes(os_: OSInterface) -> list[KFDNode]:
  """The GPU nodes (CPU nodes have gpu_id 0), in node order."""
  nodes = []
  for name in sorted(os_.listdir(TOPOLOGY), key=int):
    gpu_id = int(os_.read_text(f"{TOPOLOGY}/{name}/gpu_id").strip() or 0)
    if gpu_id == 0: continue
    props = {}
    for line in os_.read_text(f"{TOPOLOGY}/{name}/properties").splitlines():
      if line.strip():
        key, value = line.split()
        props[key] = int(value)
    for need in ("gfx_target_version", "drm_render_minor"):
      if need not in props: raise KFDTopologyError(f"topology node {name} (gpu_id {gpu_id}) has no {need} property; is the KFD driver too old?")
    nodes.append(KFDNode(int(name), gpu_id, props))
  if not nodes: raise KFDTopologyError(f"no GPU node under {TOPOLOGY}: KFD sees no AMD GPU")
  return nodes
