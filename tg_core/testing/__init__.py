"""The conformance kit: one pytest suite that any device plugin runs against its own device.

    pytest --pyargs tg_core.testing --tg-device=CPU

References are numpy. A device declares what it does not support with `Compiled.unsupported` (feature -> reason)
and its renderer's `caps.native_dtypes`; those tests skip with that reason and everything else must pass."""
