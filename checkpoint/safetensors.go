// Package checkpoint stores tensors in the Hugging Face safetensors format,
// so weights move between weft and PyTorch bit for bit.
//
// A safetensors file is an 8-byte little-endian header size N, N bytes of
// JSON describing each tensor's dtype, shape and byte range, then the raw
// little-endian tensor data. Parsing treats the file as untrusted: every
// field is validated, and malformed input yields an error, never a panic.
package checkpoint

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/weftml/weft/dtype"
)

// maxHeaderSize bounds the JSON header, so a corrupt size field cannot make
// the parser scan or allocate without limit.
const maxHeaderSize = 100 << 20

// metadataKey is the reserved header key holding free-form string metadata.
const metadataKey = "__metadata__"

// dtypeNames maps weft dtypes to their safetensors names. Formats without a
// name (E4M3FNUZ, E5M2FNUZ) cannot be stored.
var dtypeNames = map[dtype.DType]string{
	dtype.F64:    "F64",
	dtype.F32:    "F32",
	dtype.F16:    "F16",
	dtype.BF16:   "BF16",
	dtype.E4M3FN: "F8_E4M3",
	dtype.E5M2:   "F8_E5M2",
	dtype.E8M0:   "F8_E8M0",
	dtype.E2M1:   "F4",
	dtype.I64:    "I64",
	dtype.I32:    "I32",
	dtype.I8:     "I8",
}

var dtypesByName = func() map[string]dtype.DType {
	m := make(map[string]dtype.DType, len(dtypeNames))
	for d, name := range dtypeNames {
		m[name] = d
	}
	return m
}()

// Tensor is one named array as stored: raw little-endian bytes in its dtype.
// E2M1 packs two elements per byte, low nibble first.
type Tensor struct {
	Name  string
	DType dtype.DType
	Shape []int
	Data  []byte
	// Load, if set instead of Data, gives the bytes when the writer
	// reaches the tensor, and done (if not nil) takes them back once
	// written: a file of tensors that never all exist at once (a sharded
	// model gathered one parameter at a time).
	Load func() (data []byte, done func(), err error)
}

// File is a parsed safetensors file.
type File struct {
	// Metadata holds the header's "__metadata__" entries; nil if absent.
	Metadata map[string]string

	tensors map[string]Tensor
}

// Names returns the tensor names in sorted order.
func (f *File) Names() []string {
	return slices.Sorted(maps.Keys(f.tensors))
}

// Tensor returns the named tensor. Its Shape and Data share memory with the
// File, and Data with the buffer the File was parsed from.
func (f *File) Tensor(name string) (Tensor, bool) {
	t, ok := f.tensors[name]
	return t, ok
}

// ReadSafetensors reads and parses the safetensors file at path.
func ReadSafetensors(path string) (*File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	f, err := parse(b)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %s: %w", path, err)
	}
	return f, nil
}

// ParseSafetensors parses a safetensors file held in b. To avoid copying
// large checkpoints, the Data of each returned Tensor aliases b; b must not
// be modified while the File is in use.
func ParseSafetensors(b []byte) (*File, error) {
	f, err := parse(b)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	return f, nil
}

// entry is one tensor's header record, with offsets relative to the data buffer.
type entry struct {
	name       string
	dtype      dtype.DType
	shape      []int
	begin, end int
}

func parse(b []byte) (*File, error) {
	if len(b) < 8 {
		return nil, fmt.Errorf("file is %d bytes, shorter than the 8-byte header size", len(b))
	}
	n := binary.LittleEndian.Uint64(b)
	if n > maxHeaderSize {
		return nil, fmt.Errorf("header size %d exceeds the %d-byte limit", n, maxHeaderSize)
	}
	if n > uint64(len(b)-8) {
		return nil, fmt.Errorf("header size %d exceeds the %d bytes that follow it", n, len(b)-8)
	}
	header, buf := b[8:8+n], b[8+n:]
	entries, metadata, err := parseHeader(header)
	if err != nil {
		return nil, err
	}
	f := &File{Metadata: metadata, tensors: make(map[string]Tensor, len(entries))}
	for _, e := range entries {
		if e.end > len(buf) {
			return nil, fmt.Errorf("tensor %q: data_offsets end %d is beyond the %d-byte data buffer", e.name, e.end, len(buf))
		}
		size, err := byteSize(e.dtype, e.shape)
		if err != nil {
			return nil, fmt.Errorf("tensor %q: %w", e.name, err)
		}
		if size != e.end-e.begin {
			return nil, fmt.Errorf("tensor %q: %s shape %v needs %d bytes but data_offsets [%d, %d] span %d",
				e.name, dtypeNames[e.dtype], e.shape, size, e.begin, e.end, e.end-e.begin)
		}
		// The capacity limit keeps an append to one tensor from overwriting the next.
		f.tensors[e.name] = Tensor{Name: e.name, DType: e.dtype, Shape: e.shape, Data: buf[e.begin:e.end:e.end]}
	}
	slices.SortFunc(entries, func(a, b entry) int {
		return cmp.Or(cmp.Compare(a.begin, b.begin), cmp.Compare(a.end, b.end))
	})
	for i := 1; i < len(entries); i++ {
		if prev, e := entries[i-1], entries[i]; e.begin < prev.end {
			return nil, fmt.Errorf("tensors %q [%d, %d] and %q [%d, %d] overlap", prev.name, prev.begin, prev.end, e.name, e.begin, e.end)
		}
	}
	return f, nil
}

// parseHeader decodes the JSON header. It walks the top-level object token by
// token rather than unmarshaling it into a map, which would silently keep only
// the last of duplicate names.
func parseHeader(header []byte) ([]entry, map[string]string, error) {
	// Go's decoder would replace invalid UTF-8 in names with U+FFFD,
	// changing them; the reference implementation rejects it.
	if !utf8.Valid(header) {
		return nil, nil, errors.New("header is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(header))
	if tok, err := dec.Token(); err != nil {
		return nil, nil, jsonError(err)
	} else if tok != json.Delim('{') {
		return nil, nil, errors.New("header is not a JSON object")
	}
	var (
		entries  []entry
		metadata map[string]string
		seen     = make(map[string]bool)
	)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, jsonError(err)
		}
		name := tok.(string) // More reported a member, and object keys are strings.
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, nil, jsonError(err)
		}
		if seen[name] {
			return nil, nil, fmt.Errorf("duplicate header key %q", name)
		}
		seen[name] = true
		if name == metadataKey {
			if metadata, err = parseMetadata(raw); err != nil {
				return nil, nil, err
			}
			continue
		}
		e, err := parseEntry(name, raw)
		if err != nil {
			return nil, nil, fmt.Errorf("tensor %q: %w", name, err)
		}
		entries = append(entries, e)
	}
	// Consume the closing brace, then require nothing but the padding after it.
	if _, err := dec.Token(); err != nil {
		return nil, nil, jsonError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, nil, errors.New("invalid JSON header: data after the top-level object")
	}
	return entries, metadata, nil
}

// jsonError describes a JSON syntax error, with its position when known.
func jsonError(err error) error {
	if err == io.EOF {
		err = io.ErrUnexpectedEOF // The header ended before its object did.
	}
	if se, ok := errors.AsType[*json.SyntaxError](err); ok {
		return fmt.Errorf("invalid JSON header at byte %d: %w", se.Offset, err)
	}
	return fmt.Errorf("invalid JSON header: %w", err)
}

// parseMetadata decodes the "__metadata__" object, whose values must all be
// strings. A null value means no metadata.
func parseMetadata(raw json.RawMessage) (map[string]string, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, fmt.Errorf("%s is not a JSON object", metadataKey)
	}
	if fields == nil {
		return nil, nil
	}
	m := make(map[string]string, len(fields))
	for k, v := range fields {
		var s *string
		if err := json.Unmarshal(v, &s); err != nil || s == nil {
			return nil, fmt.Errorf("%s value for key %q is not a string", metadataKey, k)
		}
		m[k] = *s
	}
	return m, nil
}

// parseEntry decodes one tensor's header record. Fields are looked up by
// exact name: encoding/json matches struct fields case-insensitively and
// turns null into a zero value, both of which would accept malformed headers.
func parseEntry(name string, raw json.RawMessage) (entry, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		return entry{}, errors.New("header entry is not a JSON object")
	}
	for _, key := range []string{"dtype", "shape", "data_offsets"} {
		if _, ok := fields[key]; !ok {
			return entry{}, fmt.Errorf("missing %q", key)
		}
	}
	var dtypeName *string
	if err := json.Unmarshal(fields["dtype"], &dtypeName); err != nil || dtypeName == nil {
		return entry{}, errors.New("dtype is not a string")
	}
	d, ok := dtypesByName[*dtypeName]
	if !ok {
		return entry{}, fmt.Errorf("unsupported dtype %q", *dtypeName)
	}
	shape, err := parseInts(fields["shape"])
	if err != nil {
		return entry{}, fmt.Errorf("shape: %w", err)
	}
	offsets, err := parseInts(fields["data_offsets"])
	if err != nil {
		return entry{}, fmt.Errorf("data_offsets: %w", err)
	}
	if len(offsets) != 2 {
		return entry{}, fmt.Errorf("data_offsets has %d values, want [begin, end]", len(offsets))
	}
	begin, end := offsets[0], offsets[1]
	if begin < 0 || begin > end {
		return entry{}, fmt.Errorf("data_offsets [%d, %d] do not satisfy 0 <= begin <= end", begin, end)
	}
	return entry{name: name, dtype: d, shape: shape, begin: begin, end: end}, nil
}

// parseInts decodes a JSON array of integers. Each element must be a plain
// integer literal: no fraction, exponent, string or null.
func parseInts(raw json.RawMessage) ([]int, error) {
	var elems []json.RawMessage
	if err := json.Unmarshal(raw, &elems); err != nil || elems == nil {
		return nil, errors.New("not a JSON array")
	}
	ints := make([]int, len(elems))
	for i, e := range elems {
		v, err := strconv.Atoi(string(e))
		if err != nil {
			return nil, fmt.Errorf("element %d is not an integer in range", i)
		}
		ints[i] = v
	}
	return ints, nil
}

// byteSize returns the storage size of a tensor of dtype d, which must have a
// safetensors name, checking that the shape is valid and that its elements
// fill whole bytes, as the format requires.
func byteSize(d dtype.DType, shape []int) (int, error) {
	for _, dim := range shape {
		if dim < 0 {
			return 0, fmt.Errorf("shape %v has a negative dimension", shape)
		}
		if dim == 0 {
			return 0, nil
		}
	}
	// Bound the element count so that StorageBytes, which counts bits,
	// cannot overflow int.
	bits, n := d.Bits(), 1
	for _, dim := range shape {
		if n > (math.MaxInt-7)/bits/dim {
			return 0, fmt.Errorf("shape %v has too many elements", shape)
		}
		n *= dim
	}
	if n*bits%8 != 0 {
		return 0, fmt.Errorf("%s shape %v has %d elements of %d bits, which do not fill whole bytes", dtypeNames[d], shape, n, bits)
	}
	return d.StorageBytes(n), nil
}

// WriteSafetensors writes tensors, in order, and metadata to path. It writes a
// temporary file in the same directory, syncs it and renames it over path, so
// path holds either its previous contents or the complete new file, never a
// partial one. The file is created with mode 0644.
func WriteSafetensors(path string, tensors []Tensor, metadata map[string]string) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
			err = fmt.Errorf("safetensors: %s: %w", path, err)
		}
	}()
	w := bufio.NewWriterSize(f, 1<<20)
	if err := encode(w, tensors, metadata); err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// EncodeSafetensors writes tensors, in order, and metadata to w in the
// safetensors format. Tensors are validated before anything is written.
func EncodeSafetensors(w io.Writer, tensors []Tensor, metadata map[string]string) error {
	if err := encode(w, tensors, metadata); err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	return nil
}

func encode(w io.Writer, tensors []Tensor, metadata map[string]string) error {
	header, err := encodeHeader(tensors, metadata)
	if err != nil {
		return err
	}
	var size [8]byte
	binary.LittleEndian.PutUint64(size[:], uint64(len(header)))
	if _, err := w.Write(size[:]); err != nil {
		return err
	}
	if _, err := w.Write(header); err != nil {
		return err
	}
	for _, t := range tensors {
		if err := writeData(w, t); err != nil {
			return err
		}
	}
	return nil
}

// writeData writes t's bytes, loading them first if t has no Data.
func writeData(w io.Writer, t Tensor) error {
	if t.Load == nil {
		_, err := w.Write(t.Data)
		return err
	}
	data, done, err := t.Load()
	if err != nil {
		return fmt.Errorf("tensor %q: %w", t.Name, err)
	}
	if done != nil {
		defer done()
	}
	if size, _ := byteSize(t.DType, t.Shape); size != len(data) {
		return fmt.Errorf("tensor %q: %v needs %d bytes, Load gave %d", t.Name, t.Shape, size, len(data))
	}
	_, err = w.Write(data)
	return err
}

// headerEntry is one tensor's header record as written.
type headerEntry struct {
	DType       string `json:"dtype"`
	Shape       []int  `json:"shape"`
	DataOffsets [2]int `json:"data_offsets"`
}

// encodeHeader validates tensors and returns the JSON header, with metadata
// first and tensors in order, padded with spaces to a multiple of 8 bytes as
// the reference implementation does, so the data buffer starts aligned.
func encodeHeader(tensors []Tensor, metadata map[string]string) ([]byte, error) {
	// encoding/json would replace invalid UTF-8 with U+FFFD, silently renaming.
	for k, v := range metadata {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return nil, fmt.Errorf("%s entry %q: not valid UTF-8", metadataKey, k)
		}
	}
	var b bytes.Buffer
	b.WriteByte('{')
	if len(metadata) > 0 {
		b.WriteString(`"` + metadataKey + `":`)
		writeJSON(&b, metadata)
	}
	seen := make(map[string]bool, len(tensors))
	offset := 0
	for _, t := range tensors {
		switch {
		case t.Name == metadataKey:
			return nil, fmt.Errorf("tensor name %q is reserved", t.Name)
		case !utf8.ValidString(t.Name):
			return nil, fmt.Errorf("tensor name %q is not valid UTF-8", t.Name)
		case seen[t.Name]:
			return nil, fmt.Errorf("duplicate tensor name %q", t.Name)
		}
		seen[t.Name] = true
		name, ok := dtypeNames[t.DType]
		if !ok {
			return nil, fmt.Errorf("tensor %q: dtype %v has no safetensors name", t.Name, t.DType)
		}
		size, err := byteSize(t.DType, t.Shape)
		if err != nil {
			return nil, fmt.Errorf("tensor %q: %w", t.Name, err)
		}
		if t.Load == nil && size != len(t.Data) {
			return nil, fmt.Errorf("tensor %q: %s shape %v needs %d bytes, data has %d", t.Name, name, t.Shape, size, len(t.Data))
		}
		shape := t.Shape
		if shape == nil {
			shape = []int{} // A scalar's shape is [], not null.
		}
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		writeJSON(&b, t.Name)
		b.WriteByte(':')
		writeJSON(&b, headerEntry{DType: name, Shape: shape, DataOffsets: [2]int{offset, offset + size}})
		offset += size
	}
	b.WriteByte('}')
	for b.Len()%8 != 0 {
		b.WriteByte(' ')
	}
	if b.Len() > maxHeaderSize {
		return nil, fmt.Errorf("header of %d bytes exceeds the %d-byte limit", b.Len(), maxHeaderSize)
	}
	return b.Bytes(), nil
}

// writeJSON appends the JSON encoding of v, which must be a string, a string
// map or a headerEntry, to b. HTML escaping is off so that names such as
// "a<b" appear as written, as in files from the reference implementation.
func writeJSON(b *bytes.Buffer, v any) {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	enc.Encode(v)           // These types always encode.
	b.Truncate(b.Len() - 1) // Drop the newline Encode appends.
}
