//go:build weftpoison

package tensor

// poisonPool fills pool buffers with NaN as they are handed out and given
// back, so that reading scratch nobody wrote, or storage after Release,
// fails a test instead of shifting a result (jemalloc's opt.junk, glibc's
// MALLOC_PERTURB_). Built with -tags weftpoison.
const poisonPool = true
