//go:build !weftpoison

package tensor

// poisonPool is off in the default build: the pool's fills compile away.
const poisonPool = false
