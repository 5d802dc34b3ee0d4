package tensor

import (
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/weftml/weft/dtype"
)

// TestSizeClassWaste: every n gets the smallest class that holds it, and
// the class wastes under 25% of n (power-of-two classes waste up to 100%).
func TestSizeClassWaste(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	sizes := make([]int, 0, 1<<17)
	for n := 1; n <= 1<<16; n++ {
		sizes = append(sizes, n)
	}
	for range 1 << 16 {
		sizes = append(sizes, 1+rng.IntN(1<<40))
	}
	worst := 0.0
	for _, n := range sizes {
		c := sizeClass(n)
		size := classSize(c)
		if size < n || c > 0 && classSize(c-1) >= n {
			t.Fatalf("n=%d: class %d holds %d, class below %d", n, c, size, classSize(c-1))
		}
		waste := float64(size-n) / float64(n)
		if waste >= 0.25 {
			t.Fatalf("n=%d: class of %d wastes %.1f%%", n, size, 100*waste)
		}
		worst = max(worst, waste)
	}
	if worst < 0.2 {
		t.Errorf("worst waste %.1f%%: the sweep missed the sizes just above a class", 100*worst)
	}
	if c := sizeClass(int(^uint(0) >> 1)); c != numClasses-1 {
		t.Errorf("the largest int has class %d, not the last of the %d", c, numClasses)
	}
}

// TestClassRoundTrip: a class's size maps back to the class, and a
// released buffer serves the next request of its class, not of another.
func TestClassRoundTrip(t *testing.T) {
	for c := range numClasses - 1 { // the last class, 2^63, overflows int
		if got := sizeClass(classSize(c)); got != c {
			t.Fatalf("class %d (size %d) maps back to class %d", c, classSize(c), got)
		}
	}
	s := scratch[float32](1001) // class 1024
	first := &s[:1][0]
	release(s)
	other := scratch[float32](1025) // class 1280
	again := scratch[float32](1024)
	if &again[:1][0] != first {
		t.Errorf("a request of the released buffer's class got a new buffer")
	}
	if &other[:1][0] == first {
		t.Errorf("a request of a larger class got the released buffer")
	}
	release(again)
	release(other)
}

// idleBytes is what the free lists hold.
func idleBytes() int64 { return idleIn(free32[:], 4) + idleIn(free64[:], 8) }

func idleIn[T any](lists []freeList[T], elemBytes int) int64 {
	var idle int64
	for c := range lists {
		lists[c].mu.Lock()
		idle += int64(len(lists[c].bufs) * classSize(c) * elemBytes)
		lists[c].mu.Unlock()
	}
	return idle
}

// drain takes every idle buffer of n's class, so that the next request of
// it allocates.
func drain(n int) (taken [][]float32) {
	for range len(freeListOf[float32](sizeClass(n)).bufs) {
		taken = append(taken, scratch[float32](n))
	}
	return taken
}

// TestMemoryAccounting: Live, Requested and Peak move by exactly the class
// size of each buffer handed out and given back, Reserved by the buffers
// the pool had to allocate, and ResetPeak restarts Peak from Live.
func TestMemoryAccounting(t *testing.T) {
	const n = 3000 // 12000 bytes asked, class 3072: 12288 bytes
	const classBytes, askBytes = 3072 * 4, n * 4
	taken := drain(n)
	ResetPeak()
	base := Memory()
	if base.Peak != base.Live || base.Reserved != base.Live+idleBytes() {
		t.Fatalf("after ResetPeak: %+v, %d bytes idle", base, idleBytes())
	}
	a := scratch[float32](n) // allocated
	b := scratch[float32](n)
	got := Memory()
	want := MemStats{Live: base.Live + 2*classBytes, Requested: base.Requested + 2*askBytes, Peak: base.Live + 2*classBytes, Reserved: base.Reserved + 2*classBytes}
	if got != want {
		t.Errorf("two fresh buffers: %+v, want %+v", got, want)
	}
	release(a)
	c := scratch[float32](n - 1) // reuses a
	release(b)
	release(c)
	got = Memory()
	want = MemStats{Live: base.Live, Requested: base.Requested, Peak: base.Live + 2*classBytes, Reserved: base.Reserved + 2*classBytes}
	if got != want {
		t.Errorf("all released: %+v, want %+v", got, want)
	}
	ResetPeak()
	if got := Memory().Peak; got != base.Live {
		t.Errorf("Peak after ResetPeak is %d, want Live %d", got, base.Live)
	}
	for _, s := range taken {
		release(s)
	}
}

// TestTensorAccounting: New, clones and casts count their storage (in
// float64 words, rounded to a class) until Release or Free; tensors over
// caller memory and views do not count, and CopyFrom keeps no cast.
func TestTensorAccounting(t *testing.T) {
	base := Memory().Live
	x := New(dtype.BF16, 3, 5) // 30 bytes: 4 words, class 4
	y := x.Clone()
	z := x.To(dtype.F32) // 60 bytes: 8 words, class 8
	if got, want := Memory().Live-base, int64(32+32+64); got != want {
		t.Errorf("New, Clone and To hold %d bytes, want %d", got, want)
	}
	v := x.Reshape(5, 3)
	w := FromFloat32(make([]float32, 100), 10, 10)
	if got, want := Memory().Live-base, int64(128); got != want {
		t.Errorf("a view and a wrapped slice changed Live to %d bytes, want %d", got, want)
	}
	x.CopyFrom(z) // through a cast to bf16, given back
	if got, want := Memory().Live-base, int64(128); got != want {
		t.Errorf("CopyFrom across dtypes left Live at %d bytes, want %d", got, want)
	}
	Free(v)
	Free(w)
	Release(x)
	Free(y)
	Free(z)
	if got := Memory().Live - base; got != 0 {
		t.Errorf("%d bytes still live after Release and Free", got)
	}
}

// TestReleaseIgnoresForeignBuffers: a buffer whose capacity is no class
// size did not come from the pool and is not taken into it.
func TestReleaseIgnoresForeignBuffers(t *testing.T) {
	before, idle := Memory(), idleBytes()
	release(make([]float32, 9)) // 9 lies between classes 8 and 10
	if Memory() != before || idleBytes() != idle {
		t.Errorf("releasing a foreign buffer changed the pool: %+v -> %+v", before, Memory())
	}
}

// TestMemoryConcurrent: the counters stay exact while goroutines allocate
// and release at once (run it with -race).
func TestMemoryConcurrent(t *testing.T) {
	base := Memory()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var largest int64
	for g := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 0))
			var held [][]float64
			var mine, most int64
			for range 2000 {
				if len(held) > 0 && rng.IntN(2) == 0 {
					s := held[len(held)-1]
					held = held[:len(held)-1]
					mine -= int64(cap(s) * 8)
					release(s)
					continue
				}
				s := scratch[float64](1 + rng.IntN(5000))
				held = append(held, s)
				mine += int64(cap(s) * 8)
				most = max(most, mine)
			}
			mu.Lock()
			largest = max(largest, most)
			mu.Unlock()
			for _, s := range held {
				release(s)
			}
		})
	}
	wg.Wait()
	got := Memory()
	if got.Live != base.Live || got.Requested != base.Requested {
		t.Errorf("after every buffer came back: Live %d, Requested %d; want %d, %d", got.Live, got.Requested, base.Live, base.Requested)
	}
	if got.Reserved != got.Live+idleBytes() {
		t.Errorf("Reserved %d, want Live %d + idle %d", got.Reserved, got.Live, idleBytes())
	}
	if got.Peak < base.Live+largest {
		t.Errorf("Peak %d is below the %d bytes one goroutine alone held", got.Peak, base.Live+largest)
	}
}

// TestDropLeavesThePool: a dropped tensor's storage leaves Live and
// Reserved alike and joins no free list, so the next buffer of its class
// is allocated afresh.
func TestDropLeavesThePool(t *testing.T) {
	const n = 3000        // float64 words: class 3072
	var taken [][]float64 // empty the class first, so that New allocates
	for range len(freeListOf[float64](sizeClass(n)).bufs) {
		taken = append(taken, scratch[float64](n))
	}
	before, idle := Memory(), idleBytes()
	x := New(dtype.F64, n)
	Drop(x)
	if got := Memory(); got.Live != before.Live || got.Reserved != before.Reserved || idleBytes() != idle {
		t.Errorf("after Drop: %+v with %d bytes idle, want Live %d, Reserved %d, %d idle", got, idleBytes(), before.Live, before.Reserved, idle)
	}
	if x.pooled != nil || x.data != nil {
		t.Error("a dropped tensor keeps its storage")
	}
	y := New(dtype.F64, n)
	if got := Memory().Reserved; got != before.Reserved+3072*8 {
		t.Errorf("the next buffer of the class reserved %d bytes more, want a fresh %d", got-before.Reserved, 3072*8)
	}
	Free(y)
	for _, s := range taken {
		release(s)
	}
}
