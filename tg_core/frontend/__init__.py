"""Front-end op groups. Each module is a mixin of `Tensor` methods built from the core primitives in tensor.py."""
