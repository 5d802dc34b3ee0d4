package vec

// Add sets dst[i] += x[i], each sum rounded once: the inner loop of a bias
// add and of column sums. float32 takes sixteen elements at a time where
// the CPU has AVX-512. x needs len(dst) elements.
func Add[T ~float32 | ~float64](dst, x []T) {
	x = x[:len(dst)]
	n := 0
	if d32, ok := any(dst).([]float32); ok && useAVX512 {
		n = len(dst) &^ 15
		addAVX512(d32[:n], any(x).([]float32)[:n])
	}
	addGo(dst[n:], x[n:])
}

func addGo[T ~float32 | ~float64](dst, x []T) {
	x = x[:len(dst)]
	for i, v := range x {
		dst[i] += v
	}
}
