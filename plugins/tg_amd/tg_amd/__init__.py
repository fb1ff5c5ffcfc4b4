"""tg-amd: tg's AMD backend. So far only the AMDGPU ISA emulator (`tg_amd.emu`) exists; see README.md."""
