package tensor

import (
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"unsafe"

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

// idleBytes is what the free lists and the slabs' free blocks hold.
func idleBytes() int64 {
	slabs.mu.Lock()
	defer slabs.mu.Unlock()
	idle := idleIn(free32[:], 4) + idleIn(free64[:], 8)
	for _, b := range slabs.free {
		idle += b.size
	}
	return idle
}

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
// size, or a large one that starts no block handed out with its
// capacity, did not come from the pool and is not taken into it.
func TestReleaseIgnoresForeignBuffers(t *testing.T) {
	big := scratch[float32](1 << 18) // a 1 MiB slab block
	before, idle := Memory(), idleBytes()
	for _, s := range [][]float32{
		make([]float32, 9),       // 9 lies between classes 8 and 10
		make([]float32, 1<<20),   // a class size, but served from slabs
		big[512:],                // into the block's middle
		big[: 1<<17 : 1<<17],     // the block's start, with less capacity
		make([]float32, 1<<16+9), // a slab block's capacity, not in a slab
	} {
		release(s)
		forget(s)
		if Memory() != before || idleBytes() != idle {
			t.Fatalf("releasing a foreign buffer of capacity %d changed the pool: %+v -> %+v", cap(s), before, Memory())
		}
	}
	release(big)
	checkSlabs(t)
}

// checkSlabs checks that the blocks of every slab tile it in address
// order, that the index finds each, that no two free blocks are
// neighbours, and that the free list holds exactly the free blocks, in
// order. It returns the handed-out blocks by slab.
func checkSlabs(t *testing.T) map[*slab]int {
	t.Helper()
	slabs.mu.Lock()
	defer slabs.mu.Unlock()
	used := map[*slab]int{}
	free := map[*block]bool{}
	for i, s := range slabs.all {
		if i > 0 && slabs.all[i-1].base >= s.base {
			t.Fatalf("slabs out of address order")
		}
		var off int64
		indexed := 0
		for _, b := range s.at {
			if b != nil {
				indexed++
			}
		}
		blocks := 0
		var prev *block
		for b := s.at[0]; b != nil; prev, b = b, b.next {
			blocks++
			switch {
			case b.slab != s || b.prev != prev || b.off != off || b.size <= 0 || b.size%slabAlign != 0:
				t.Fatalf("slab %d: block %+v after offset %d does not tile", i, *b, off)
			case s.at[b.off/slabAlign] != b:
				t.Fatalf("slab %d: the index lost the block at %d", i, b.off)
			case b.free && prev != nil && prev.free:
				t.Fatalf("slab %d: free blocks at %d and %d are not merged", i, prev.off, b.off)
			}
			off += b.size
			if b.free {
				free[b] = true
			} else {
				used[s]++
			}
		}
		if off != s.bytes() || indexed != blocks {
			t.Fatalf("slab %d: blocks cover %d of %d bytes, the index holds %d of %d", i, off, s.bytes(), indexed, blocks)
		}
	}
	for i, b := range slabs.free {
		if !free[b] || i > 0 && !slabs.free[i-1].less(b) {
			t.Fatalf("free list entry %d (%+v) is not a free block in order", i, *b)
		}
		delete(free, b)
	}
	if len(free) != 0 {
		t.Fatalf("%d free blocks are missing from the free list", len(free))
	}
	return used
}

// addr is where s's memory starts.
func addr[T float](s []T) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(s))) }

// TestSlabProperty: random requests of both element types, given back by
// release and by forget in random order, never get overlapping memory;
// every block has the capacity Memory counts for it; the counters stay
// exact; and once everything is given back, each slab is one free block.
func TestSlabProperty(t *testing.T) {
	type buf struct {
		lo, hi    uintptr
		requested int64
		f32       []float32
		f64       []float64
	}
	rng := rand.New(rand.NewPCG(3, 4))
	base := Memory()
	var bufs []buf
	var live, requested int64
	give := func(i int) {
		b := bufs[i]
		bufs = slices.Delete(bufs, i, i+1)
		live -= int64(b.hi - b.lo)
		requested -= b.requested
		drop := rng.IntN(4) == 0
		switch {
		case b.f32 != nil && drop:
			forget(b.f32)
		case b.f32 != nil:
			release(b.f32)
		case drop:
			forget(b.f64)
		default:
			release(b.f64)
		}
	}
	for step := range 3000 {
		if len(bufs) > 0 && (len(bufs) >= 24 || rng.IntN(2) == 0) {
			give(rng.IntN(len(bufs)))
		} else {
			bytes := slabMin + rng.IntN(3<<20)
			if rng.IntN(40) == 0 {
				bytes = slabSize + rng.IntN(8<<20) // a slab of its own
			}
			var b buf
			if rng.IntN(2) == 0 {
				b.f32 = scratch[float32](bytes / 4)
				b.lo, b.hi, b.requested = addr(b.f32), addr(b.f32)+uintptr(4*cap(b.f32)), int64(4*len(b.f32))
				if len(b.f32) != bytes/4 || int64(4*cap(b.f32)) != held(bytes/4, 4) {
					t.Fatalf("scratch(%d) has length %d, capacity %d", bytes/4, len(b.f32), cap(b.f32))
				}
			} else {
				b.f64 = scratch[float64](bytes / 8)
				b.lo, b.hi, b.requested = addr(b.f64), addr(b.f64)+uintptr(8*cap(b.f64)), int64(8*len(b.f64))
				if len(b.f64) != bytes/8 || int64(8*cap(b.f64)) != held(bytes/8, 8) {
					t.Fatalf("scratch(%d) has length %d, capacity %d", bytes/8, len(b.f64), cap(b.f64))
				}
			}
			bufs = append(bufs, b)
			live += int64(b.hi - b.lo)
			requested += b.requested
		}
		sorted := slices.SortedFunc(slices.Values(bufs), func(a, b buf) int { return cmpAddr(a.lo, b.lo) })
		for i := 1; i < len(sorted); i++ {
			if sorted[i].lo < sorted[i-1].hi {
				t.Fatalf("step %d: blocks [%#x, %#x) and [%#x, %#x) overlap", step, sorted[i-1].lo, sorted[i-1].hi, sorted[i].lo, sorted[i].hi)
			}
		}
		got := Memory()
		if got.Live != base.Live+live || got.Requested != base.Requested+requested || got.Reserved != got.Live+idleBytes() {
			t.Fatalf("step %d: %+v with %d bytes idle; want Live %d, Requested %d", step, got, idleBytes(), base.Live+live, base.Requested+requested)
		}
		if step%100 == 0 {
			checkSlabs(t)
		}
	}
	for len(bufs) > 0 {
		give(len(bufs) - 1)
	}
	used := checkSlabs(t)
	slabs.mu.Lock()
	for _, s := range slabs.all {
		if used[s] == 0 && (s.at[0] == nil || s.at[0].next != nil) {
			t.Errorf("a slab with nothing handed out is not one free block")
		}
	}
	slabs.mu.Unlock()
	if got := Memory(); got.Live != base.Live || got.Requested != base.Requested {
		t.Errorf("after every buffer came back: %+v, want Live %d, Requested %d", got, base.Live, base.Requested)
	}
}

// TestSlabServesOtherSizes: two neighbouring 1 MiB blocks given back (a
// step's activations) merge to serve a 2 MiB request (a gradient) with no
// new slab, and a 1.5 and a 0.5 MiB request split the hole again.
func TestSlabServesOtherSizes(t *testing.T) {
	const mib = 1 << 20
	// Four 1 MiB blocks one after another in a slab (a guard, the two, a guard):
	// once best fit has filled the holes other tests left, requests are
	// carved from one free block in address order.
	var taken [][]float32
	var run [][]float32
	for len(run) < 4 && len(taken) < 64 {
		taken = append(taken, scratch[float32](mib/4))
		if run = append(run, taken[len(taken)-1]); len(run) > 1 && !neighbours(run[len(run)-2], run[len(run)-1]) {
			run = run[len(run)-1:]
		}
	}
	if len(run) < 4 {
		t.Fatalf("64 requests of 1 MiB were never carved four one after another")
	}
	before := Memory()
	release(run[1])
	release(run[2])
	grad := scratch[float64](2 * mib / 8)
	if addr(grad) != addr(run[1]) || Memory().Reserved != before.Reserved {
		t.Errorf("a 2 MiB request after two neighbouring 1 MiB blocks were freed reserved %d bytes more, at %#x, not %#x",
			Memory().Reserved-before.Reserved, addr(grad), addr(run[1]))
	}
	release(grad)
	a, b := scratch[float32](3*mib/8), scratch[float64](mib/16)
	if addr(a) != addr(run[1]) || addr(b) != addr(run[1])+3*mib/2 || Memory().Reserved != before.Reserved {
		t.Errorf("1.5 and 0.5 MiB requests in a 2 MiB hole landed at +%d and +%d, reserving %d bytes more",
			addr(a)-addr(run[1]), addr(b)-addr(run[1]), Memory().Reserved-before.Reserved)
	}
	release(a)
	release(b)
	for _, s := range taken {
		if addr(s) != addr(run[1]) && addr(s) != addr(run[2]) {
			release(s)
		}
	}
	checkSlabs(t)
}

// neighbours reports whether b's block follows a's in a slab (slabs may
// also lie one after another in memory).
func neighbours(a, b []float32) bool {
	slabs.mu.Lock()
	defer slabs.mu.Unlock()
	x, y := slabBlock(addr(a)), slabBlock(addr(b))
	return x != nil && x.next == y
}

// TestDropFreesSlabs: a dropped slab block leaves Live and becomes free in
// its slab, Reserved unchanged; a slab left wholly free by Drop goes to the
// garbage collector, out of Reserved.
func TestDropFreesSlabs(t *testing.T) {
	const words = (slabSize + 32<<20) / 8 // past any slab the other tests left
	before, idle := Memory(), idleBytes()
	x := New(dtype.F64, words)
	y := New(dtype.F64, 1<<17) // 1 MiB, in a slab of its own or another
	if got := Memory().Reserved - before.Reserved; got < 8*words {
		t.Fatalf("a request larger than any slab reserved %d bytes, want at least %d", got, 8*words)
	}
	Drop(x)
	Drop(y)
	if got := Memory(); got.Live != before.Live || got.Requested != before.Requested || got.Reserved-before.Reserved != idleBytes()-idle {
		t.Errorf("after Drop: %+v, %d bytes idle; before: %+v, %d idle", got, idleBytes(), before, idle)
	}
	if got := Memory().Reserved - before.Reserved; got > slabSize {
		t.Errorf("the dropped slab of %d bytes stays reserved: %d bytes more than before", 8*words, got)
	}
	checkSlabs(t)
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
				n := 1 + rng.IntN(5000)
				if rng.IntN(8) == 0 {
					n = slabMin/8 + rng.IntN(1<<17) // from a slab
				}
				s := scratch[float64](n)
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
