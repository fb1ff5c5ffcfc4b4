"""A renderer wrapper that enforces the declared contract: reading any attribute of the renderer object outside
`RENDERER_CONTRACT` (or any field outside its RendererCaps, which a frozen dataclass refuses anyway) raises.

It raises `RendererContractError`, not AttributeError, so probing with a default (getattr with three arguments, hasattr) fails loudly
instead of silently taking the default. The conformance kit uses it with `--tg-strict-renderer`."""
from __future__ import annotations
from typing import Any

from tg_core.device import RENDERER_CONTRACT, Renderer

class RendererContractError(TypeError):
  """Something read an attribute of a renderer that the declared contract doesn't have."""

class StrictRenderer(Renderer):
  """Forwards the declared attributes to `inner`; every other attribute read raises RendererContractError."""
  def __init__(self, inner: Renderer):
    if not isinstance(inner, Renderer): raise TypeError(f"StrictRenderer wraps a Renderer, got {type(inner).__name__}")
    object.__setattr__(self, "_inner", inner)

  def __getattribute__(self, name: str) -> Any:
    if name.startswith("__") and name.endswith("__"): return object.__getattribute__(self, name)  # the object protocol (isinstance, repr)
    inner = object.__getattribute__(self, "_inner")
    if name in RENDERER_CONTRACT: return getattr(inner, name)
    raise RendererContractError(f"{name!r} was read from renderer {type(inner).__qualname__}, but it is not part of the declared "
                                f"renderer contract {sorted(RENDERER_CONTRACT)}: declare it in RendererCaps (tg_core.device) instead")

  def __setattr__(self, name: str, value: Any) -> None:
    if name not in RENDERER_CONTRACT: raise RendererContractError(f"{name!r} set on a renderer: not part of the declared contract")
    setattr(object.__getattribute__(self, "_inner"), name, value)

  def __repr__(self) -> str: return f"<StrictRenderer {object.__getattribute__(self, '_inner')!r}>"
