package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"

	"github.com/weftml/weft/precision"
)

// precisionFlags are the flags that choose a run's precision.
type precisionFlags struct {
	spec      string
	rules     []string
	lossScale string
}

func (f *precisionFlags) register(fs *pflag.FlagSet, def string) {
	fs.StringVar(&f.spec, "precision", def, "precision spec: "+strings.Join(precision.Specs(), ", ")+", a jmp policy, or several joined by +")
	fs.StringArrayVar(&f.rules, "precision-for", nil, "per-module precision 'GLOB=SPEC' (repeatable), e.g. 'vision.**=16-mixed' or 'kind:Conv2d=bf16-true'")
	fs.StringVar(&f.lossScale, "loss-scale", "auto", "auto (a dynamic scaler whenever a module computes in float16) or none")
}

// policy builds the precision policy the flags describe; deprecation
// notices go to warn.
func (f *precisionFlags) policy(warn io.Writer) (precision.Policy, precision.LossScaling, error) {
	opts := precision.Options{Warn: func(msg string) { fmt.Fprintln(warn, "weft: warning:", msg) }}
	return precision.ParsePolicy(f.spec, f.rules, f.lossScale, opts)
}
