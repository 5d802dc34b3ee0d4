package proc

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Budget is the memory the process may use, and where that was read.
type Budget struct {
	Bytes int64
	// Source says where Bytes comes from: "cgroup memory.max",
	// "cgroup memory.limit_in_bytes" or "MemAvailable".
	Source string
}

// MemoryBudget is the memory this process may use: its cgroup's limit
// (v2 memory.max, v1 memory.limit_in_bytes) when one is set, else what
// /proc/meminfo says is available plus what the process holds already;
// false where the system says neither.
func MemoryBudget() (Budget, bool) {
	if b, ok := cgroupLimit("/proc/self/cgroup", "/sys/fs/cgroup"); ok {
		return b, true
	}
	info, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return Budget{}, false
	}
	avail := fieldKB(info, "MemAvailable:")
	if avail == 0 {
		return Budget{}, false
	}
	return Budget{Bytes: avail + RSS(), Source: "MemAvailable"}, true
}

// cgroupLimit reads the memory limit of the cgroup that the file self
// (/proc/self/cgroup) names under root, v2 first; false for none or no
// limit ("max", or v1's page-rounded maximum).
func cgroupLimit(self, root string) (Budget, bool) {
	b, err := os.ReadFile(self)
	if err != nil {
		return Budget{}, false
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3) // hierarchy-ID:controllers:path
		if len(parts) != 3 {
			continue
		}
		var dir, name string
		switch {
		case parts[0] == "0" && parts[1] == "":
			dir, name = root, "memory.max"
		case strings.Contains(","+parts[1]+",", ",memory,"):
			dir, name = filepath.Join(root, "memory"), "memory.limit_in_bytes"
		default:
			continue
		}
		// A container's namespace mounts its own cgroup at the root.
		for _, file := range []string{filepath.Join(dir, parts[2], name), filepath.Join(dir, name)} {
			if n, ok := readLimit(file); ok {
				return Budget{Bytes: n, Source: "cgroup " + name}, true
			}
		}
	}
	return Budget{}, false
}

// unlimitedV1 is at least what cgroup v1 reports for no limit (the
// largest page-aligned int64).
const unlimitedV1 = 1 << 62

// readLimit reads a cgroup limit file; false for none.
func readLimit(file string) (int64, bool) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, false
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n >= unlimitedV1 {
		return 0, false
	}
	return n, true
}
