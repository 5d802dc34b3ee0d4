package proc

import (
	"os"
	"path/filepath"
	"testing"
)

// TestCgroupLimit reads a cgroup v2 and a v1 limit from the files a
// process's /proc/self/cgroup names, at its path or, in a container's
// namespace, at the root, and finds no limit in "max" or v1's maximum.
func TestCgroupLimit(t *testing.T) {
	for _, tc := range []struct {
		self, file, value string
		want              int64
		source            string
	}{
		{"0::/job\n", "job/memory.max", "1073741824\n", 1 << 30, "cgroup memory.max"},
		{"0::/job\n", "memory.max", "2147483648\n", 2 << 30, "cgroup memory.max"},
		{"0::/job\n", "job/memory.max", "max\n", 0, ""},
		{"4:memory:/job\n0::/\n", "memory/job/memory.limit_in_bytes", "536870912\n", 1 << 29, "cgroup memory.limit_in_bytes"},
		{"4:memory:/job\n", "memory/memory.limit_in_bytes", "9223372036854771712\n", 0, ""},
	} {
		root := t.TempDir()
		self := filepath.Join(root, "self")
		os.WriteFile(self, []byte(tc.self), 0o644)
		os.MkdirAll(filepath.Dir(filepath.Join(root, tc.file)), 0o755)
		os.WriteFile(filepath.Join(root, tc.file), []byte(tc.value), 0o644)
		b, ok := cgroupLimit(self, root)
		if b.Bytes != tc.want || ok != (tc.want > 0) || b.Source != tc.source {
			t.Errorf("%q with %s = %q: got %+v, %v; want %d from %q", tc.self, tc.file, tc.value, b, ok, tc.want, tc.source)
		}
	}
}

// TestMemoryBudget: this machine says how much memory the process may
// use, and it is more than the process holds.
func TestMemoryBudget(t *testing.T) {
	b, ok := MemoryBudget()
	if _, err := os.Stat("/proc/meminfo"); err != nil {
		t.Skip("no /proc/meminfo")
	}
	if !ok || b.Bytes <= RSS() || RSS() == 0 {
		t.Errorf("budget %+v (%v), resident %d", b, ok, RSS())
	}
}
