"""The device layer, one module per role: errors, buffers and allocators, the on-disk cache, the compiled device and
its program, DEV parsing, and the registry. Import it through `tg_core.device`, the facade that declares what a plugin
may rely on."""
