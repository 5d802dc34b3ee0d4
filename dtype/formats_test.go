package dtype

import (
	"bufio"
	"encoding/csv"
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// referenceCSV returns the path of formats.csv: in $WEFT_REFERENCE_DIR if set,
// else the repository's copy.
func referenceCSV() string {
	if dir := os.Getenv("WEFT_REFERENCE_DIR"); dir != "" {
		return filepath.Join(dir, "formats.csv")
	}
	return filepath.Join("..", "testdata", "reference", "formats.csv")
}

// cast is the cast a formats.csv column holds.
type cast struct {
	d   DType
	sat bool
}

// parseColumn maps a column name to its cast: a dtype name Parse accepts,
// optionally followed by "_sat" (saturating) and "_gpu" (the same cast on
// CUDA, which differs only in NaN sign bits).
func parseColumn(name string) (cast, error) {
	base, _ := strings.CutSuffix(name, "_gpu")
	base, sat := strings.CutSuffix(base, "_sat")
	d, err := Parse(base)
	if err != nil {
		return cast{}, err
	}
	if d == F64 || d == I64 {
		return cast{}, errors.New("no 32-bit code for " + d.String())
	}
	return cast{d, sat}, nil
}

// isNaNCode reports whether code c of d is a NaN.
func isNaNCode(d DType, c uint32) bool {
	v := d.Decode(c)
	return v != v
}

// TestFormatsCSV checks every cell of formats.csv through the scalar Encode,
// the bulk Encode and EncodeF64: NaN results by NaN-ness, others bit for bit.
func TestFormatsCSV(t *testing.T) {
	path := referenceCSV()
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("reference data missing: %s not found (set WEFT_REFERENCE_DIR to the folder holding formats.csv)", path)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	br := bufio.NewReader(f)
	if _, err := br.ReadString('\n'); err != nil { // the comment line
		t.Fatalf("%s: %v", path, err)
	}
	records, err := csv.NewReader(br).ReadAll()
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(records) < 2 {
		t.Fatalf("%s: no data rows", path)
	}
	header, rows := records[0], records[1:]
	if header[0] != "f32" {
		t.Fatalf("%s: first column is %q, want f32", path, header[0])
	}
	casts := make([]cast, len(header))
	for j, name := range header[1:] {
		if casts[j+1], err = parseColumn(name); err != nil {
			t.Fatalf("%s: unknown column %q: %v", path, name, err)
		}
	}

	parse := func(row, col int) (uint32, bool) {
		s := rows[row][col]
		if s == "" {
			return 0, false
		}
		v, err := strconv.ParseUint(s, 16, 32)
		if err != nil {
			t.Fatalf("%s: row %d column %s: %v", path, row+3, header[col], err)
		}
		return uint32(v), true
	}
	inputs := make([]float32, len(rows))
	wide := make([]float64, len(rows))
	for i := range rows {
		b, ok := parse(i, 0)
		if !ok {
			t.Fatalf("%s: row %d has no input", path, i+3)
		}
		inputs[i] = math.Float32frombits(b)
		wide[i] = float64(inputs[i])
	}

	checked := 0
	for j := 1; j < len(header); j++ {
		c := casts[j]
		bulk := make([]byte, c.d.StorageBytes(len(inputs)))
		Encode(c.d, bulk, inputs, c.sat)
		bulk64 := make([]byte, len(bulk)) // exact float64 inputs must give the same codes
		EncodeF64(c.d, bulk64, wide, c.sat)
		failures := 0
		for i, x := range inputs {
			want, ok := parse(i, j)
			if !ok {
				continue
			}
			checked++
			wantNaN := isNaNCode(c.d, want)
			for _, p := range [...]struct {
				path string
				got  uint32
			}{
				{"Encode", c.d.Encode(x, c.sat)},
				{"bulk Encode", storedCode(c.d, bulk, i)},
				{"EncodeF64", storedCode(c.d, bulk64, i)},
			} {
				if wantNaN && isNaNCode(c.d, p.got) || !wantNaN && p.got == want {
					continue
				}
				if failures++; failures <= 10 {
					t.Errorf("%s: %s(%#x = %g, sat=%v) = %#x, want %#x", header[j], p.path, math.Float32bits(x), x, c.sat, p.got, want)
				}
			}
		}
		if failures > 10 {
			t.Errorf("%s: %d mismatches in all", header[j], failures)
		}
	}
	t.Logf("%s: %d rows, %d cells checked", path, len(rows), checked)
}

// storedCode returns the code of element i in storage of d.
func storedCode(d DType, b []byte, i int) uint32 {
	switch d.Bits() {
	case 4:
		return uint32(b[i/2]>>(4*(i&1))) & 0xf
	case 8:
		return uint32(b[i])
	case 16:
		return uint32(le.Uint16(b[2*i:]))
	default:
		return le.Uint32(b[4*i:])
	}
}

// TestRoundTripExhaustive checks that every non-NaN code of the 16-, 8- and
// 4-bit formats decodes to a value that encodes back to the same code, by
// the scalar and the bulk paths, saturating or not.
func TestRoundTripExhaustive(t *testing.T) {
	for _, d := range []DType{F16, BF16, E4M3FN, E5M2, E4M3FNUZ, E5M2FNUZ, E2M1, E8M0} {
		n := 1 << d.Bits()
		codes := make([]uint32, n)
		for c := range codes {
			codes[c] = uint32(c)
		}
		stored := make([]byte, d.StorageBytes(n))
		for i, c := range codes {
			switch d.Bits() {
			case 4:
				stored[i/2] |= byte(c) << (4 * (i & 1))
			case 8:
				stored[i] = byte(c)
			case 16:
				le.PutUint16(stored[2*i:], uint16(c))
			}
		}
		vals := make([]float32, n)
		Decode(d, vals, stored)
		for _, sat := range []bool{false, true} {
			again := make([]byte, len(stored))
			Encode(d, again, vals, sat)
			for i, c := range codes {
				v := d.Decode(c)
				if math.Float32bits(v) != math.Float32bits(vals[i]) {
					t.Errorf("%v: Decode(%#x) = %g, bulk Decode %g", d, c, v, vals[i])
				}
				if v != v {
					if got := d.Encode(v, sat); !isNaNCode(d, got) {
						t.Errorf("%v: NaN code %#x re-encodes to %#x (sat=%v)", d, c, got, sat)
					}
					continue
				}
				if sat && math.IsInf(float64(v), 0) {
					continue // saturates to ±Max
				}
				if got := d.Encode(v, sat); got != c {
					t.Errorf("%v: Encode(Decode(%#x) = %g, sat=%v) = %#x", d, c, v, sat, got)
				}
				if got := storedCode(d, again, i); got != c {
					t.Errorf("%v: bulk Encode(Decode(%#x) = %g, sat=%v) = %#x", d, c, v, sat, got)
				}
			}
		}
	}
}
