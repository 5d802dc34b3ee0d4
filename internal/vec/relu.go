package vec

// ReLU sets y[i] = max(x[i], 0): a NaN passes unchanged and -0 becomes +0.
// y needs len(x) elements.
func ReLU(y, x []float32) {
	y = y[:len(x)]
	n := 0
	if useAVX512 {
		n = len(x) &^ 15
		reluAVX512(y[:n], x[:n])
	}
	reluGo(y[n:], x[n:])
}

func reluGo(y, x []float32) {
	y = y[:len(x)]
	for i, v := range x {
		y[i] = 0
		if v > 0 || v != v {
			y[i] = v
		}
	}
}

// ReLUBackward sets dx[i] = dy[i] where y[i] > 0 or is NaN, and 0 where
// y[i] ≤ 0, as PyTorch's threshold_backward: y is ReLU's output. dx and dy
// need len(y) elements.
func ReLUBackward(dx, y, dy []float32) {
	dx, dy = dx[:len(y)], dy[:len(y)]
	n := 0
	if useAVX512 {
		n = len(y) &^ 15
		reluBackwardAVX512(dx[:n], y[:n], dy[:n])
	}
	reluBackwardGo(dx[n:], y[n:], dy[n:])
}

func reluBackwardGo(dx, y, dy []float32) {
	dx, dy = dx[:len(y)], dy[:len(y)]
	for i, v := range y {
		dx[i] = dy[i]
		if v <= 0 {
			dx[i] = 0
		}
	}
}
