"""functions/mlp's model on the CPU, written again from its definition (functions/mlp/mlp_model.cc)
with the standard library only: the weights and inputs splitmix64 makes, and the forward pass in
double precision, so the tests check mlp's answers against something that shares none of its code.

Float32 arithmetic is emulated exactly: each operation mlp does in float is done in double and
rounded to float32 (array('f')), which gives float32's own result for +, -, *, / and sqrt (a double
carries more than twice float32's 24 bits).
"""

from __future__ import annotations

import array
import math
import operator
from typing import NamedTuple

_MASK = (1 << 64) - 1
_BIAS_STREAM = 1 << 32
_INPUT_STREAM = 1 << 33

WEIGHT_SEED = 42  # mlp's default --weight-seed


class Shape(NamedTuple):
    width: int
    layers: int
    batch: int


def shape_for_size(mib: int, layers: int, batch: int = 1) -> Shape:
    """mlp's shape for --size-mib `mib` --layers `layers` (mlp::ShapeForSize)."""
    layers = max(1, layers)
    per_layer = mib * (1 << 20) / layers / 4
    return Shape(max(16, int(math.sqrt(per_layer)) // 16 * 16), layers, max(1, batch))


def _f32(value: float) -> float:
    return array.array("f", [value])[0]


def _mix(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def _uniforms(seed: int, stream: int, count: int, scale: float = 1.0) -> array.array[float]:
    """Elements 0..count-1 of (seed, stream): uniform in [-1, 1) as float32, times float32 `scale`."""
    base = _mix(seed ^ ((stream * 0xD1B54A32D192ED03) & _MASK))
    values: list[float] = []
    append = values.append
    golden, c1, c2, unit = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB, 2.0 ** -52
    # _mix(base + i) inlined: this loop makes every weight, millions of them.
    for i in range(count):
        x = (base + i + golden) & _MASK
        x = ((x ^ (x >> 30)) * c1) & _MASK
        x = ((x ^ (x >> 27)) * c2) & _MASK
        x ^= x >> 31
        append((x >> 11) * unit - 1.0)
    floats = array.array("f", values)
    if scale != 1.0:
        floats = array.array("f", [scale * v for v in floats])
    return floats


def _scale(shape: Shape) -> float:
    return _f32(1.0 / _f32(math.sqrt(_f32(float(shape.width)))))


def input_from_seed(seed: int, shape: Shape) -> list[float]:
    """The input of request {"seed": seed}."""
    return list(_uniforms(seed, _INPUT_STREAM, shape.width * shape.batch))


class Model:
    """mlp's weights for `weight_seed` at `shape`, made once; forward() runs any input through them."""

    def __init__(self, shape: Shape, weight_seed: int = WEIGHT_SEED) -> None:
        self.shape = shape
        w = shape.width
        scale = _scale(shape)
        # Row r of layer l's (column-major) weights: elements r, r + w, r + 2w, ...
        self.rows = []
        self.biases = []
        for layer in range(shape.layers):
            weights = _uniforms(weight_seed, layer, w * w, scale)
            self.rows.append([weights[r::w] for r in range(w)])
            self.biases.append(_uniforms(weight_seed, _BIAS_STREAM + layer, w, scale))

    def forward(self, x: list[float]) -> list[float]:
        """mlp::Reference: per layer y = act(W x + b), act ReLU but on the last layer."""
        w = self.shape.width
        for layer in range(self.shape.layers):
            relu = layer + 1 < self.shape.layers
            y = []
            for b in range(self.shape.batch):
                column = x[b * w:(b + 1) * w]
                for r, row in enumerate(self.rows[layer]):
                    acc = 0.0
                    for product in map(operator.mul, row, column):
                        acc += product  # in order, in double, as the C++ reference sums
                    v = _f32(_f32(acc) + self.biases[layer][r])
                    y.append(0.0 if relu and v < 0 else v)
            x = y
        return x


def summary(output: list[float], shape: Shape) -> tuple[list[int], float]:
    """What mlp answers for `output`: each batch column's argmax (the first maximum) and the sum."""
    w = shape.width
    argmax = []
    for b in range(shape.batch):
        column = output[b * w:(b + 1) * w]
        argmax.append(column.index(max(column)))
    return argmax, math.fsum(output)
