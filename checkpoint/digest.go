package checkpoint

import (
	"bufio"
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"slices"
)

// Digest is the SHA-256 (hex) of a safetensors file and of each tensor's
// bytes.
type Digest struct {
	File    string            `json:"file"`
	Tensors map[string]string `json:"tensors"`
}

// DigestSafetensors hashes the safetensors file at path as it streams
// past, never holding more than its header and a read buffer: a
// checkpoint's digests cost no memory for its tensors.
func DigestSafetensors(path string) (Digest, error) {
	f, err := os.Open(path)
	if err != nil {
		return Digest{}, fmt.Errorf("safetensors: %w", err)
	}
	defer f.Close()
	d, err := digest(bufio.NewReaderSize(f, 1<<20))
	if err != nil {
		return Digest{}, fmt.Errorf("safetensors: %s: %w", path, err)
	}
	return d, nil
}

func digest(r io.Reader) (Digest, error) {
	file := sha256.New()
	r = io.TeeReader(r, file)
	var size [8]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		return Digest{}, fmt.Errorf("reading the header size: %w", err)
	}
	n := binary.LittleEndian.Uint64(size[:])
	if n > maxHeaderSize {
		return Digest{}, fmt.Errorf("header size %d exceeds the %d-byte limit", n, maxHeaderSize)
	}
	header := make([]byte, n)
	if _, err := io.ReadFull(r, header); err != nil {
		return Digest{}, fmt.Errorf("reading the header: %w", err)
	}
	entries, _, err := parseHeader(header)
	if err != nil {
		return Digest{}, err
	}
	slices.SortFunc(entries, func(a, b entry) int { return cmp.Compare(a.begin, b.begin) })
	d := Digest{Tensors: make(map[string]string, len(entries))}
	at := 0
	for _, e := range entries {
		if e.begin < at {
			return Digest{}, fmt.Errorf("tensor %q overlaps the one before it", e.name)
		}
		if _, err := io.CopyN(io.Discard, r, int64(e.begin-at)); err != nil {
			return Digest{}, fmt.Errorf("tensor %q: %w", e.name, err)
		}
		h := sha256.New()
		if _, err := io.CopyN(h, r, int64(e.end-e.begin)); err != nil {
			return Digest{}, fmt.Errorf("tensor %q: %w", e.name, err)
		}
		d.Tensors[e.name], at = hex.EncodeToString(h.Sum(nil)), e.end
	}
	if _, err := io.Copy(io.Discard, r); err != nil {
		return Digest{}, err
	}
	d.File = hex.EncodeToString(file.Sum(nil))
	return d, nil
}
