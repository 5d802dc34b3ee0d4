package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/weftml/weft/dtype"
)

// referenceFile is the PyTorch-written reference checkpoint, from
// $WEFT_REFERENCE_DIR when set.
func referenceFile() string {
	dir := os.Getenv("WEFT_REFERENCE_DIR")
	if dir == "" {
		dir = filepath.Join("..", "testdata", "reference")
	}
	return filepath.Join(dir, "refs.safetensors")
}

func TestReadReference(t *testing.T) {
	f, err := ReadSafetensors(referenceFile())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []Tensor{
		{Name: "mlp.x", DType: dtype.F32, Shape: []int{512, 32}},
		{Name: "mlp.y", DType: dtype.I64, Shape: []int{512}},
		{Name: "gpt.final64.head.weight", DType: dtype.F64, Shape: []int{48, 32}},
	} {
		got, ok := f.Tensor(want.Name)
		if !ok {
			t.Errorf("tensor %q missing", want.Name)
			continue
		}
		if got.DType != want.DType || !slices.Equal(got.Shape, want.Shape) {
			t.Errorf("tensor %q: got %v %v, want %v %v", want.Name, got.DType, got.Shape, want.DType, want.Shape)
		}
	}
	for _, name := range f.Names() {
		tn, _ := f.Tensor(name)
		n := 1
		for _, d := range tn.Shape {
			n *= d
		}
		if want := tn.DType.StorageBytes(n); len(tn.Data) != want {
			t.Errorf("tensor %q: %d bytes, want %d for %v %v", name, len(tn.Data), want, tn.DType, tn.Shape)
		}
	}
	y, ok := f.Tensor("mlp.y")
	if !ok {
		t.Fatal("mlp.y missing")
	}
	for i := range len(y.Data) / 8 {
		if label := int64(binary.LittleEndian.Uint64(y.Data[8*i:])); label < 0 || label >= 10 {
			t.Fatalf("mlp.y[%d] = %d, want a class in [0, 10)", i, label)
		}
	}
}

// sampleTensors returns one tensor of every storable dtype, including a
// scalar, an empty tensor and packed F4, filled with random bytes.
func sampleTensors() []Tensor {
	r := rand.New(rand.NewPCG(1, 2))
	random := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return b
	}
	return []Tensor{
		{Name: "w.f32", DType: dtype.F32, Shape: []int{2, 3}, Data: random(24)},
		{Name: "w.f64", DType: dtype.F64, Shape: []int{2}, Data: random(16)},
		{Name: "b.bf16", DType: dtype.BF16, Shape: []int{3}, Data: random(6)},
		{Name: "scalar.f16", DType: dtype.F16, Shape: nil, Data: random(2)},
		{Name: "e4m3", DType: dtype.E4M3FN, Shape: []int{4}, Data: random(4)},
		{Name: "e5m2", DType: dtype.E5M2, Shape: []int{1, 2}, Data: random(2)},
		{Name: "scale.e8m0", DType: dtype.E8M0, Shape: []int{2}, Data: random(2)},
		{Name: "packed.f4", DType: dtype.E2M1, Shape: []int{2, 2}, Data: random(2)},
		{Name: "i8", DType: dtype.I8, Shape: []int{5}, Data: random(5)},
		{Name: "empty.i32", DType: dtype.I32, Shape: []int{0, 3}, Data: nil},
		{Name: "ünïcode <&>", DType: dtype.I64, Shape: []int{1}, Data: random(8)},
	}
}

// checkTensors reports any difference between f's tensors and want.
func checkTensors(t *testing.T, f *File, want []Tensor) {
	t.Helper()
	var names []string
	for _, w := range want {
		names = append(names, w.Name)
		got, ok := f.Tensor(w.Name)
		if !ok {
			t.Errorf("tensor %q missing", w.Name)
			continue
		}
		if got.Name != w.Name || got.DType != w.DType || !slices.Equal(got.Shape, w.Shape) || !bytes.Equal(got.Data, w.Data) {
			t.Errorf("tensor %q: got %v %v %x, want %v %v %x", w.Name, got.DType, got.Shape, got.Data, w.DType, w.Shape, w.Data)
		}
	}
	slices.Sort(names)
	if got := f.Names(); !slices.Equal(got, names) {
		t.Errorf("Names() = %q, want %q", got, names)
	}
}

func TestRoundTrip(t *testing.T) {
	tensors := sampleTensors()
	metadata := map[string]string{"format": "pt", "note": "ünïcode <&>\n"}
	path := filepath.Join(t.TempDir(), "model.safetensors")
	if err := WriteSafetensors(path, tensors, metadata); err != nil {
		t.Fatal(err)
	}
	f, err := ReadSafetensors(path)
	if err != nil {
		t.Fatal(err)
	}
	checkTensors(t, f, tensors)
	if !maps.Equal(f.Metadata, metadata) {
		t.Errorf("Metadata = %q, want %q", f.Metadata, metadata)
	}

	written, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := EncodeSafetensors(&buf, tensors, metadata); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), written) {
		t.Error("EncodeSafetensors and WriteSafetensors produced different bytes")
	}
	if f, err = ParseSafetensors(buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	checkTensors(t, f, tensors)
}

func TestLayout(t *testing.T) {
	tensors := sampleTensors()
	var buf bytes.Buffer
	if err := EncodeSafetensors(&buf, tensors, nil); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	n := binary.LittleEndian.Uint64(b)
	if n%8 != 0 {
		t.Errorf("header size %d is not a multiple of 8", n)
	}
	header := b[8 : 8+n]
	if trimmed := bytes.TrimRight(header, " "); len(header)-len(trimmed) >= 8 || !bytes.HasSuffix(trimmed, []byte("}")) {
		t.Errorf("header %q is not JSON padded with fewer than 8 spaces", header)
	}
	if !bytes.Contains(header, []byte(`"ünïcode <&>":`)) {
		t.Errorf("header %q does not hold the name \"ünïcode <&>\" as written", header)
	}
	var entries map[string]struct {
		DType       string `json:"dtype"`
		DataOffsets [2]int `json:"data_offsets"`
	}
	if err := json.Unmarshal(header, &entries); err != nil {
		t.Fatal(err)
	}
	if _, ok := entries[metadataKey]; ok {
		t.Error("empty metadata was written")
	}
	// Tensors are laid out contiguously in the order given.
	offset := 0
	for _, tn := range tensors {
		e := entries[tn.Name]
		if want := [2]int{offset, offset + len(tn.Data)}; e.DataOffsets != want {
			t.Errorf("tensor %q: data_offsets %v, want %v", tn.Name, e.DataOffsets, want)
		}
		offset += len(tn.Data)
	}
	if offset != len(b)-8-int(n) {
		t.Errorf("data buffer is %d bytes, want %d", len(b)-8-int(n), offset)
	}
	for name, want := range map[string]string{"e4m3": "F8_E4M3", "scale.e8m0": "F8_E8M0", "packed.f4": "F4"} {
		if got := entries[name].DType; got != want {
			t.Errorf("tensor %q: dtype written as %q, want %q", name, got, want)
		}
	}
}

// safetensors assembles a file from a header and a data buffer of size bytes.
func safetensors(header string, size int) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(b, header...)
	return append(b, make([]byte, size)...)
}

// withHeaderSize returns a file whose header size field is n, followed by rest.
func withHeaderSize(n uint64, rest string) []byte {
	return append(binary.LittleEndian.AppendUint64(nil, n), rest...)
}

var malformed = []struct {
	name  string
	file  []byte
	error string
}{
	{"empty", nil, "shorter than the 8-byte header size"},
	{"short", []byte{1, 0, 0}, "shorter than the 8-byte header size"},
	{"header past end", withHeaderSize(100, "{}"), "header size 100 exceeds the 2 bytes"},
	{"header over limit", withHeaderSize(1<<40, "{}"), "exceeds the 104857600-byte limit"},
	{"invalid JSON", safetensors(`{"a":`, 0), "invalid JSON header"},
	{"bad key", safetensors(`{1:2}`, 0), "invalid JSON header at byte"},
	{"trailing data", safetensors(`{} {}`, 0), "data after the top-level object"},
	{"not UTF-8", safetensors("{\"\xff\":{}}", 0), "not valid UTF-8"},
	{"not an object", safetensors(`[1]`, 0), "header is not a JSON object"},
	{"entry not object", safetensors(`{"a":[1]}`, 0), `tensor "a": header entry is not a JSON object`},
	{"entry null", safetensors(`{"a":null}`, 0), `tensor "a": header entry is not a JSON object`},
	{"missing dtype", safetensors(`{"a":{"shape":[],"data_offsets":[0,0]}}`, 0), `tensor "a": missing "dtype"`},
	{"missing shape", safetensors(`{"a":{"dtype":"F32","data_offsets":[0,4]}}`, 4), `tensor "a": missing "shape"`},
	{"missing offsets", safetensors(`{"a":{"dtype":"F32","shape":[]}}`, 4), `tensor "a": missing "data_offsets"`},
	{"case-folded field", safetensors(`{"a":{"DTYPE":"F32","shape":[],"data_offsets":[0,4]}}`, 4), `missing "dtype"`},
	{"dtype null", safetensors(`{"a":{"dtype":null,"shape":[],"data_offsets":[0,0]}}`, 0), `tensor "a": dtype is not a string`},
	{"dtype U8", safetensors(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 1), `tensor "a": unsupported dtype "U8"`},
	{"dtype BOOL", safetensors(`{"a":{"dtype":"BOOL","shape":[1],"data_offsets":[0,1]}}`, 1), `tensor "a": unsupported dtype "BOOL"`},
	{"shape not array", safetensors(`{"a":{"dtype":"F32","shape":3,"data_offsets":[0,12]}}`, 12), `tensor "a": shape: not a JSON array`},
	{"shape float", safetensors(`{"a":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}}`, 8), `shape: element 0 is not an integer`},
	{"shape string", safetensors(`{"a":{"dtype":"F32","shape":["2"],"data_offsets":[0,8]}}`, 8), `shape: element 0 is not an integer`},
	{"shape null element", safetensors(`{"a":{"dtype":"F32","shape":[2,null],"data_offsets":[0,8]}}`, 8), `shape: element 1 is not an integer`},
	{"shape huge dim", safetensors(`{"a":{"dtype":"F32","shape":[1e30],"data_offsets":[0,8]}}`, 8), `shape: element 0 is not an integer`},
	{"negative dim", safetensors(`{"a":{"dtype":"F32","shape":[-1,2],"data_offsets":[0,8]}}`, 8), `tensor "a": shape [-1 2] has a negative dimension`},
	{"shape overflow", safetensors(`{"a":{"dtype":"I8","shape":[4294967296,4294967296],"data_offsets":[0,0]}}`, 0), `tensor "a": shape [4294967296 4294967296] has too many elements`},
	{"byte size overflow", safetensors(`{"a":{"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,0]}}`, 0), `has too many elements`},
	{"odd F4", safetensors(`{"a":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}}`, 2), `tensor "a": F4 shape [3] has 3 elements of 4 bits, which do not fill whole bytes`},
	{"offsets one", safetensors(`{"a":{"dtype":"F32","shape":[],"data_offsets":[4]}}`, 4), `tensor "a": data_offsets has 1 values, want [begin, end]`},
	{"offsets three", safetensors(`{"a":{"dtype":"F32","shape":[],"data_offsets":[0,4,8]}}`, 8), `data_offsets has 3 values`},
	{"offsets object", safetensors(`{"a":{"dtype":"F32","shape":[],"data_offsets":{}}}`, 4), `tensor "a": data_offsets: not a JSON array`},
	{"offsets reversed", safetensors(`{"a":{"dtype":"F32","shape":[],"data_offsets":[4,0]}}`, 4), `tensor "a": data_offsets [4, 0] do not satisfy 0 <= begin <= end`},
	{"offsets negative", safetensors(`{"a":{"dtype":"F32","shape":[],"data_offsets":[-4,0]}}`, 4), `data_offsets [-4, 0] do not satisfy`},
	{"end past buffer", safetensors(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, 4), `tensor "a": data_offsets end 8 is beyond the 4-byte data buffer`},
	{"size mismatch", safetensors(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`, 8), `tensor "a": F32 shape [2] needs 8 bytes but data_offsets [0, 4] span 4`},
	{"overlap", safetensors(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, 8), `tensors "a" [0, 8] and "b" [4, 8] overlap`},
	{"same range", safetensors(`{"b":{"dtype":"I8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"I8","shape":[1],"data_offsets":[0,1]}}`, 1), `overlap`},
	{"duplicate name", safetensors(`{"a":{"dtype":"I8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"I8","shape":[1],"data_offsets":[1,2]}}`, 2), `duplicate header key "a"`},
	{"duplicate metadata", safetensors(`{"__metadata__":{},"__metadata__":{}}`, 0), `duplicate header key "__metadata__"`},
	{"metadata number", safetensors(`{"__metadata__":{"epoch":3}}`, 0), `__metadata__ value for key "epoch" is not a string`},
	{"metadata null value", safetensors(`{"__metadata__":{"k":null}}`, 0), `__metadata__ value for key "k" is not a string`},
	{"metadata array", safetensors(`{"__metadata__":["k"]}`, 0), `__metadata__ is not a JSON object`},
}

func TestParseMalformed(t *testing.T) {
	for _, tc := range malformed {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseSafetensors(tc.file)
			if err == nil {
				t.Fatalf("parsed without error, want %q", tc.error)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "safetensors: ") || strings.Contains(msg, "\n") || !strings.Contains(msg, tc.error) {
				t.Errorf("error %q, want one line with prefix %q containing %q", msg, "safetensors: ", tc.error)
			}
		})
	}
}

func TestParseAccepts(t *testing.T) {
	for _, tc := range []struct {
		name, header string
		size         int
	}{
		{"padded header", `{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}    `, 4},
		{"no tensors", `{}`, 0},
		{"null metadata", `{"__metadata__":null}`, 0},
		{"unknown fields ignored", `{"a":{"dtype":"I8","shape":[],"data_offsets":[0,1],"extra":[1]}}`, 1},
		{"empty tensors share an offset", `{"a":{"dtype":"I8","shape":[0],"data_offsets":[1,1]},"b":{"dtype":"I8","shape":[0],"data_offsets":[1,1]},"c":{"dtype":"I8","shape":[1],"data_offsets":[0,1]}}`, 1},
		{"zero dim beside a huge one", `{"a":{"dtype":"F64","shape":[0,9223372036854775807],"data_offsets":[0,0]}}`, 0},
		{"gap and trailing bytes", `{"a":{"dtype":"I8","shape":[1],"data_offsets":[2,3]}}`, 5},
	} {
		if _, err := ParseSafetensors(safetensors(tc.header, tc.size)); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

func TestParseAliasesInput(t *testing.T) {
	b := safetensors(`{"a":{"dtype":"I8","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"I8","shape":[1],"data_offsets":[1,2]}}`, 2)
	f, err := ParseSafetensors(b)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := f.Tensor("a")
	b[len(b)-2] = 7
	if a.Data[0] != 7 {
		t.Error("Data does not alias the parsed buffer")
	}
	if cap(a.Data) != 1 {
		t.Errorf("cap(Data) = %d, want 1 so appends cannot overwrite the next tensor", cap(a.Data))
	}
}

func TestEncodeInvalid(t *testing.T) {
	f32 := func(name string, shape []int, n int) Tensor {
		return Tensor{Name: name, DType: dtype.F32, Shape: shape, Data: make([]byte, n)}
	}
	for _, tc := range []struct {
		name     string
		tensors  []Tensor
		metadata map[string]string
		error    string
	}{
		{"size mismatch", []Tensor{f32("a", []int{2}, 4)}, nil, `tensor "a": F32 shape [2] needs 8 bytes, data has 4`},
		{"negative dim", []Tensor{f32("a", []int{-1}, 0)}, nil, `tensor "a": shape [-1] has a negative dimension`},
		{"duplicate", []Tensor{f32("a", nil, 4), f32("a", nil, 4)}, nil, `duplicate tensor name "a"`},
		{"reserved", []Tensor{f32(metadataKey, nil, 4)}, nil, `tensor name "__metadata__" is reserved`},
		{"bad name", []Tensor{f32("\xff", nil, 4)}, nil, `not valid UTF-8`},
		{"bad metadata", nil, map[string]string{"k": "\xff"}, `__metadata__ entry "k": not valid UTF-8`},
		{"no safetensors name", []Tensor{{Name: "a", DType: dtype.E4M3FNUZ, Shape: []int{1}, Data: []byte{0}}}, nil, `tensor "a": dtype`},
		{"odd F4", []Tensor{{Name: "a", DType: dtype.E2M1, Shape: []int{1}, Data: []byte{0}}}, nil, `do not fill whole bytes`},
	} {
		var buf bytes.Buffer
		err := EncodeSafetensors(&buf, tc.tensors, tc.metadata)
		if err == nil || !strings.HasPrefix(err.Error(), "safetensors: ") || !strings.Contains(err.Error(), tc.error) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.error)
		}
		if buf.Len() != 0 {
			t.Errorf("%s: wrote %d bytes before failing", tc.name, buf.Len())
		}
	}
}

func TestWriteAtomic(t *testing.T) {
	dir := t.TempDir()
	if err := WriteSafetensors(filepath.Join(dir, "missing", "m.safetensors"), sampleTensors(), nil); err == nil {
		t.Error("writing into a missing directory succeeded")
	}
	assertDir(t, dir)

	path := filepath.Join(dir, "m.safetensors")
	old := sampleTensors()[:1]
	if err := WriteSafetensors(path, old, nil); err != nil {
		t.Fatal(err)
	}
	bad := []Tensor{{Name: "a", DType: dtype.F32, Shape: []int{2}, Data: make([]byte, 3)}}
	if err := WriteSafetensors(path, bad, nil); err == nil {
		t.Error("writing an invalid tensor succeeded")
	}
	assertDir(t, dir, "m.safetensors")
	f, err := ReadSafetensors(path)
	if err != nil {
		t.Fatal(err)
	}
	checkTensors(t, f, old)
}

// assertDir checks that dir holds exactly the named entries.
func assertDir(t *testing.T, dir string, want ...string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s holds %q, want %q", dir, got, want)
	}
}

func FuzzParseSafetensors(f *testing.F) {
	var buf bytes.Buffer
	if err := EncodeSafetensors(&buf, sampleTensors(), map[string]string{"format": "pt"}); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add(safetensors(`{"a":{"dtype":"F4","shape":[2],"data_offsets":[0,1]},"b":{"dtype":"BF16","shape":[1,1],"data_offsets":[1,3]}}`, 3))
	for _, tc := range malformed {
		f.Add(tc.file)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		parsed, err := ParseSafetensors(b)
		if err != nil {
			return
		}
		var tensors []Tensor
		for _, name := range parsed.Names() {
			tn, _ := parsed.Tensor(name)
			tensors = append(tensors, tn)
		}
		var buf bytes.Buffer
		if err := EncodeSafetensors(&buf, tensors, parsed.Metadata); err != nil {
			t.Fatalf("re-encoding a parsed file: %v", err)
		}
		again, err := ParseSafetensors(buf.Bytes())
		if err != nil {
			t.Fatalf("re-parsing a re-encoded file: %v", err)
		}
		checkTensors(t, again, tensors)
		if !maps.Equal(again.Metadata, parsed.Metadata) {
			t.Errorf("Metadata %q, want %q", again.Metadata, parsed.Metadata)
		}
	})
}

// TestEncodeMatchesReference re-encodes the reference file, written by the
// Hugging Face implementation, in its own tensor order and expects the same
// bytes: header layout, padding and offsets all agree with the reference.
func TestEncodeMatchesReference(t *testing.T) {
	want, err := os.ReadFile(referenceFile())
	if err != nil {
		t.Fatal(err)
	}
	f, err := ParseSafetensors(want)
	if err != nil {
		t.Fatal(err)
	}
	var offsets map[string]struct {
		DataOffsets [2]int `json:"data_offsets"`
	}
	n := binary.LittleEndian.Uint64(want)
	if err := json.Unmarshal(want[8:8+n], &offsets); err != nil {
		t.Fatal(err)
	}
	names := f.Names()
	slices.SortFunc(names, func(a, b string) int { return offsets[a].DataOffsets[0] - offsets[b].DataOffsets[0] })
	var tensors []Tensor
	for _, name := range names {
		tn, _ := f.Tensor(name)
		tensors = append(tensors, tn)
	}
	var got bytes.Buffer
	if err := EncodeSafetensors(&got, tensors, f.Metadata); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Errorf("re-encoded file differs from the reference:\n got header %q\nwant header %q", got.Bytes()[8:min(got.Len(), 200)], want[8:200])
	}
}

// TestDigestSafetensors: the streamed digests are the SHA-256 of the
// whole file and of each tensor's bytes as a full read finds them.
func TestDigestSafetensors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "d.safetensors")
	tensors := []Tensor{
		{Name: "b", DType: dtype.F32, Shape: []int{3}, Data: make([]byte, 12)},
		{Name: "a", DType: dtype.BF16, Shape: []int{2, 2}, Data: []byte{1, 2, 3, 4, 5, 6, 7, 8}},
	}
	tensors[0].Data[5] = 9
	if err := WriteSafetensors(path, tensors, map[string]string{"k": "v"}); err != nil {
		t.Fatal(err)
	}
	got, err := DigestSafetensors(path)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	hash := func(b []byte) string { h := sha256.Sum256(b); return hex.EncodeToString(h[:]) }
	if got.File != hash(raw) {
		t.Errorf("file digest %s, want %s", got.File, hash(raw))
	}
	f, err := ParseSafetensors(raw)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range f.Names() {
		tt, _ := f.Tensor(name)
		if got.Tensors[name] != hash(tt.Data) {
			t.Errorf("tensor %s digest %s, want %s", name, got.Tensors[name], hash(tt.Data))
		}
	}
	if len(got.Tensors) != 2 {
		t.Errorf("%d tensor digests, want 2", len(got.Tensors))
	}
	if _, err := DigestSafetensors(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("a missing file digested")
	}
}

// TestWriteLoaded: a tensor given by Load is written as its Data would
// be, Load is called once and done after the write; a Load error or a
// wrong size fails the write.
func TestWriteLoaded(t *testing.T) {
	dir := t.TempDir()
	data := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	var loads, dones int
	loaded := Tensor{Name: "w", DType: dtype.F32, Shape: []int{2}, Load: func() ([]byte, func(), error) {
		loads++
		return data, func() { dones++ }, nil
	}}
	path := filepath.Join(dir, "a.safetensors")
	if err := WriteSafetensors(path, []Tensor{loaded}, nil); err != nil {
		t.Fatal(err)
	}
	f, err := ReadSafetensors(path)
	if err != nil {
		t.Fatal(err)
	}
	if w, _ := f.Tensor("w"); !bytes.Equal(w.Data, data) || loads != 1 || dones != 1 {
		t.Errorf("wrote %v after %d loads and %d dones; want %v, 1, 1", w.Data, loads, dones, data)
	}
	boom := errors.New("boom")
	failing := Tensor{Name: "w", DType: dtype.F32, Shape: []int{2}, Load: func() ([]byte, func(), error) { return nil, nil, boom }}
	if err := WriteSafetensors(path, []Tensor{failing}, nil); !errors.Is(err, boom) {
		t.Errorf("a failing Load wrote with error %v", err)
	}
	short := Tensor{Name: "w", DType: dtype.F32, Shape: []int{3}, Load: func() ([]byte, func(), error) { return data, nil, nil }}
	if err := WriteSafetensors(path, []Tensor{short}, nil); err == nil {
		t.Error("a Load of the wrong size wrote")
	}
}
