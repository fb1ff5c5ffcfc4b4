"""The GGML tensor types tg-gguf provides: id, name, block elements and block bytes (ggml's `type_traits`), and the
"module:function" that dequantizes a block array. Plain data: the plugin manifest imports it without importing tg_core.tensor."""
from __future__ import annotations
from typing import NamedTuple

QK_K = 256

class GGMLType(NamedTuple):
  id: int
  name: str
  block_elems: int
  block_bytes: int
  description: str

GGML_TYPES: tuple[GGMLType, ...] = (
  GGMLType(0, "F32", 1, 4, "IEEE float32"),
  GGMLType(1, "F16", 1, 2, "IEEE float16"),
  GGMLType(2, "Q4_0", 32, 18, "fp16 scale, 32 4-bit ints - 8"),
  GGMLType(3, "Q4_1", 32, 20, "fp16 scale and min, 32 4-bit ints"),
  GGMLType(6, "Q5_0", 32, 22, "fp16 scale, 32 5-bit ints - 16"),
  GGMLType(7, "Q5_1", 32, 24, "fp16 scale and min, 32 5-bit ints"),
  GGMLType(8, "Q8_0", 32, 34, "fp16 scale, 32 int8"),
  GGMLType(9, "Q8_1", 32, 36, "fp16 scale and fp16 sum, 32 int8 (ggml's block_q8_1)"),
  GGMLType(10, "Q2_K", QK_K, 84, "super-block of 16x16 2-bit ints, 4-bit scales and mins"),
  GGMLType(11, "Q3_K", QK_K, 110, "super-block of 16x16 3-bit ints, 6-bit scales"),
  GGMLType(12, "Q4_K", QK_K, 144, "super-block of 8x32 4-bit ints, 6-bit scales and mins"),
  GGMLType(13, "Q5_K", QK_K, 176, "super-block of 8x32 5-bit ints, 6-bit scales and mins"),
  GGMLType(14, "Q6_K", QK_K, 210, "super-block of 16x16 6-bit ints, int8 scales"),
  GGMLType(15, "Q8_K", QK_K, 292, "fp32 scale, 256 int8, 16 int16 block sums"),
  GGMLType(16, "IQ2_XXS", QK_K, 66, "2.06 bpw: E8 lattice grid of 256, 7-bit sign patterns"),
  GGMLType(17, "IQ2_XS", QK_K, 74, "2.31 bpw: grid of 512, 4-bit scales"),
  GGMLType(18, "IQ3_XXS", QK_K, 98, "3.06 bpw: grid of 256 x 4"),
  GGMLType(19, "IQ1_S", QK_K, 50, "1.56 bpw: ternary grid of 2048"),
  GGMLType(20, "IQ4_NL", 32, 18, "fp16 scale, 32 4-bit indices into a non-linear table"),
  GGMLType(21, "IQ3_S", QK_K, 110, "3.44 bpw: grid of 512 x 4, explicit signs"),
  GGMLType(22, "IQ2_S", QK_K, 82, "2.5 bpw: grid of 1024, explicit signs"),
  GGMLType(23, "IQ4_XS", QK_K, 136, "4.25 bpw: non-linear table, 6-bit scales"),
  GGMLType(24, "I8", 1, 1, "int8"),
  GGMLType(25, "I16", 1, 2, "int16"),
  GGMLType(26, "I32", 1, 4, "int32"),
  GGMLType(27, "I64", 1, 8, "int64"),
  GGMLType(28, "F64", 1, 8, "IEEE float64"),
  GGMLType(29, "IQ1_M", QK_K, 56, "1.75 bpw: ternary grid of 2048, fp16 scale split over 4 nibbles"),
  GGMLType(30, "BF16", 1, 2, "bfloat16"),
  GGMLType(34, "TQ1_0", QK_K, 54, "ternary, 5 trits per byte"),
  GGMLType(35, "TQ2_0", QK_K, 66, "ternary, 2 bits per value"),
  GGMLType(39, "MXFP4", 32, 17, "OCP MX: e8m0 scale, 32 e2m1"),
  GGMLType(40, "NVFP4", 64, 36, "4 ue4m3 scales, 64 e2m1"),
)
BY_ID: dict[int, GGMLType] = {t.id: t for t in GGML_TYPES}
BY_NAME: dict[str, GGMLType] = {t.name: t for t in GGML_TYPES}

def dequantize_target(t: GGMLType) -> str: return f"tg_gguf.quants:dequantize_{t.name.lower()}"
