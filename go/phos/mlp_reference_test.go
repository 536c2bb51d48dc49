package phos

// functions/mlp's model on the CPU, written again from its definition (as python/tests/
// mlp_reference.py is), so the tests check mlp's answers against code that shares none of mlp's:
// splitmix64 makes the weights, biases and inputs, and the forward pass sums in double precision.
//
// Each float32 operation of mlp is done here in float64 and converted to float32, which gives
// float32's correctly rounded result for + and * (a float64 carries more than twice float32's 24
// bits), and the explicit conversions keep Go from fusing a multiply and an add.

import (
	"encoding/json"
	"math"
	"sync"
	"testing"
)

const (
	mlpWeightSeed  = 42 // mlp's default --weight-seed
	mlpBiasStream  = uint64(1) << 32
	mlpInputStream = uint64(1) << 33
)

type mlpShape struct {
	width, layers, batch int
}

// mlpShapeForSize is mlp's shape for --size-mib mib --layers layers, batch 1 (mlp::ShapeForSize).
func mlpShapeForSize(mib, layers int) mlpShape {
	if layers < 1 {
		layers = 1
	}
	perLayer := float64(mib) * (1 << 20) / float64(layers) / 4
	width := int(math.Sqrt(perLayer)) / 16 * 16
	if width < 16 {
		width = 16
	}
	return mlpShape{width: width, layers: layers, batch: 1}
}

func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// uniforms is elements 0..count-1 of (seed, stream), uniform in [-1, 1) as float32, each times
// scale in float32.
func uniforms(seed, stream uint64, count int, scale float32) []float32 {
	base := splitmix64(seed ^ (stream * 0xd1b54a32d192ed03))
	out := make([]float32, count)
	for i := range out {
		v := float32(float64(splitmix64(base+uint64(i))>>11)*0x1p-52 - 1)
		out[i] = float32(float64(scale) * float64(v))
	}
	return out
}

func mlpInputFromSeed(seed uint64, shape mlpShape) []float32 {
	return uniforms(seed, mlpInputStream, shape.width*shape.batch, 1)
}

// mlpModel is mlp's weights at a shape, made once; forward runs any input through them.
type mlpModel struct {
	shape  mlpShape
	rows   [][][]float32 // rows[layer][r]: row r of the layer's weights
	biases [][]float32
}

func newMlpModel(shape mlpShape, weightSeed uint64) *mlpModel {
	w := shape.width
	scale := float32(1 / float64(float32(math.Sqrt(float64(float32(w))))))
	m := &mlpModel{shape: shape}
	for layer := 0; layer < shape.layers; layer++ {
		// Column-major: element (r, k) is weights[k*w + r].
		weights := uniforms(weightSeed, uint64(layer), w*w, scale)
		rows := make([][]float32, w)
		for r := range rows {
			rows[r] = make([]float32, w)
			for k := range rows[r] {
				rows[r][k] = weights[k*w+r]
			}
		}
		m.rows = append(m.rows, rows)
		m.biases = append(m.biases, uniforms(weightSeed, mlpBiasStream+uint64(layer), w, scale))
	}
	return m
}

// forward is mlp::Reference: per layer y = act(W x + b), act ReLU but on the last layer.
func (m *mlpModel) forward(x []float32) []float32 {
	w := m.shape.width
	for layer := 0; layer < m.shape.layers; layer++ {
		relu := layer+1 < m.shape.layers
		y := make([]float32, len(x))
		for b := 0; b < m.shape.batch; b++ {
			column := x[b*w : (b+1)*w]
			for r, row := range m.rows[layer] {
				acc := 0.0
				for k, weight := range row {
					acc += float64(weight) * float64(column[k]) // in order, as the C++ reference sums
				}
				v := float32(float64(float32(acc)) + float64(m.biases[layer][r]))
				if relu && v < 0 {
					v = 0
				}
				y[b*w+r] = v
			}
		}
		x = y
	}
	return x
}

// What the tests deploy: the shape tests/integration/mlp_expect.h checks.
var (
	mlpArgs      = []string{"--size-mib", "16", "--layers", "4"}
	mlpTestShape = mlpShapeForSize(16, 4)

	mlpOnce     sync.Once
	mlpTheModel *mlpModel
)

func mlpReference() *mlpModel {
	mlpOnce.Do(func() { mlpTheModel = newMlpModel(mlpTestShape, mlpWeightSeed) })
	return mlpTheModel
}

// checkMlp holds body to mlp_expect.h's checks for input seed: argmax exact, checksum within 1e-3
// relative, and with full each output within 1e-4.
func checkMlp(t *testing.T, body []byte, seed uint64, full bool) {
	t.Helper()
	var answer struct {
		Argmax   []int     `json:"argmax"`
		Checksum *float64  `json:"checksum"`
		Output   []float64 `json:"output"`
	}
	if err := json.Unmarshal(body, &answer); err != nil || answer.Checksum == nil || len(answer.Argmax) != 1 {
		t.Fatalf("not mlp's answer (%v): %.200s", err, body)
	}
	expected := mlpReference().forward(mlpInputFromSeed(seed, mlpTestShape))
	argmax, sum := 0, 0.0
	for i, v := range expected {
		if v > expected[argmax] {
			argmax = i
		}
		sum += float64(v)
	}
	if answer.Argmax[0] != argmax {
		t.Errorf("seed %d: argmax %d, the reference's %d", seed, answer.Argmax[0], argmax)
	}
	if math.Abs(*answer.Checksum-sum) > 1e-3*(1+math.Abs(sum)) {
		t.Errorf("seed %d: checksum %v, the reference's %v", seed, *answer.Checksum, sum)
	}
	if !full {
		return
	}
	if len(answer.Output) != len(expected) {
		t.Fatalf("seed %d: %d outputs, the reference %d", seed, len(answer.Output), len(expected))
	}
	for i, want := range expected {
		if got := answer.Output[i]; math.Abs(got-float64(want)) > 1e-4 {
			t.Fatalf("seed %d: output %d is %v, the reference's %v", seed, i, got, want)
		}
	}
}

// The reference's own arithmetic, against values worked out by hand from the definition.
func TestMlpReferenceShapeAndGenerator(t *testing.T) {
	if s := mlpShapeForSize(16, 4); s != (mlpShape{width: 1024, layers: 4, batch: 1}) {
		t.Errorf("shape for 16 MiB over 4 layers: %+v, want width 1024", s)
	}
	if s := mlpShapeForSize(0, 0); s.width != 16 || s.layers != 1 {
		t.Errorf("the smallest shape: %+v, want width 16 and one layer", s)
	}
	// splitmix64's first output for state 0 (Vigna's reference implementation).
	if got := splitmix64(0); got != 0xe220a8397b1dcdaf {
		t.Errorf("splitmix64(0) = %#x", got)
	}
	for _, v := range uniforms(1, 2, 1000, 1) {
		if v < -1 || v >= 1 {
			t.Fatalf("uniform %v outside [-1, 1)", v)
		}
	}
}
