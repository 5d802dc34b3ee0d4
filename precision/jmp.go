package precision

import (
	"fmt"
	"strings"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/dtype"
)

// JMP is a policy in the style of DeepMind's jmp: parameters stored in
// Params, every op computing in Compute (inputs and parameters cast on
// use), outputs cast to Output.
type JMP struct {
	Params, Compute, Output dtype.DType
}

// ParseJMP reads "params=float32,compute=bfloat16,output=float32"; an
// omitted key defaults to float32.
func ParseJMP(s string) (JMP, error) {
	p := JMP{Params: dtype.F32, Compute: dtype.F32, Output: dtype.F32}
	fields := map[string]*dtype.DType{"params": &p.Params, "compute": &p.Compute, "output": &p.Output}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		dst, known := fields[k]
		if !ok || !known {
			return JMP{}, fmt.Errorf("precision policy %q: %q is not key=dtype with key params, compute or output", s, kv)
		}
		dt, err := dtype.Parse(v)
		if err != nil || !dt.IsFloat() {
			return JMP{}, fmt.Errorf("precision policy %q: %s=%s is not a float dtype", s, k, v)
		}
		*dst = dt
	}
	return p, nil
}

func (p JMP) Name() string {
	return fmt.Sprintf("params=%s,compute=%s,output=%s", p.Params, p.Compute, p.Output)
}

func (p JMP) StorageDType() dtype.DType { return p.Params }
func (p JMP) InputDType() dtype.DType   { return p.Compute }
func (p JMP) OutputDType() dtype.DType  { return p.Output }

// CastInput runs every op in the compute dtype (float64 is left alone).
func (p JMP) CastInput(_ autograd.Op, in dtype.DType) dtype.DType {
	if in == dtype.F64 {
		return in
	}
	return p.Compute
}
