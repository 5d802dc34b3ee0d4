package precision_test

import (
	"errors"
	"fmt"
	"log"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/precision"
)

// Plugins compose by role: bf16-true owns storage, fp8 replaces the
// Linears' GEMMs, so together they are Transformer Engine's recipe. Two
// plugins claiming one exclusive role are a *ConflictError that names the
// role and both.
func ExampleCompose() {
	bf16, _ := precision.Parse("bf16-true", precision.Options{})
	fp8, _ := precision.Parse("fp8", precision.Options{})
	te, err := precision.Compose(bf16, fp8)
	if err != nil {
		log.Fatal(err)
	}
	storage, _ := precision.StorageDType(te)
	fmt.Println(te.Name(), "stores parameters in", storage)

	mixed16, _ := precision.Parse("16-mixed", precision.Options{})
	mixedBF16, _ := precision.Parse("bf16-mixed", precision.Options{})
	_, err = precision.Compose(mixed16, mixedBF16)
	var conflict *precision.ConflictError
	fmt.Println(errors.As(err, &conflict), err)
	// Output:
	// bf16-true+fp8 stores parameters in bfloat16
	// true precision: role compute (autocast) claimed by 16-mixed and bf16-mixed
}

// ParseSpec reads every spec --precision takes into a recipe, whose
// String spells arguments back in canonical order; New builds a fresh
// plugin of it for each model and rank. A bad argument says what is
// accepted.
func ExampleParseSpec() {
	spec, err := precision.ParseSpec("bf16-mixed+fp8(history=16, margin=1)", precision.Options{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(spec)
	p, err := spec.New()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(p.Name())
	_, err = precision.ParseSpec("fp8(margn=1)", precision.Options{})
	fmt.Println(err)
	// Output:
	// bf16-mixed+fp8(margin=1,history=16)
	// bf16-mixed+fp8
	// precision "fp8(margn=1)": unknown argument margn; accepted: margin, history, algo, format
}

// A policy is a spec for the whole model and rules for parts of it;
// Resolve builds fresh plugins for one model and gives every module its
// own. The most specific rule wins, and a module no rule names inherits
// its parent's plugin.
func ExampleParsePolicy() {
	pol, scaling, err := precision.ParsePolicy("bf16-true", []string{"vision.**=16-mixed", "vision.conv1=32-true"}, "auto", precision.Options{})
	if err != nil {
		log.Fatal(err)
	}
	res, err := pol.Resolve(models.NewHybrid(nn.NewInit(1), models.DefaultHybrid), scaling)
	if err != nil {
		log.Fatal(err)
	}
	for _, s := range res.Scopes {
		switch s.Path {
		case "vision", "vision.conv1", "vision.proj", "decoder.blocks.0.fc":
			fmt.Printf("%-20s %s\n", s.Path, s.Plugin.Name())
		}
	}
	fmt.Println("scales the loss:", res.ScalesLoss())
	// Output:
	// vision               16-mixed
	// vision.conv1         32-true
	// vision.proj          16-mixed
	// decoder.blocks.0.fc  bf16-true
	// scales the loss: true
}

// f64Norm is a plugin of one's own with one role, compute: layer_norm runs
// in float64, every other op in its inputs' dtype.
type f64Norm struct{}

func (f64Norm) Name() string { return "example-f64-layernorm" }

func (f64Norm) CastInput(op autograd.Op, in dtype.DType) dtype.DType {
	if op == autograd.OpLayerNorm {
		return dtype.F64
	}
	return in
}

// Registering at init makes the name a spec before any flag is read; the
// factory builds a fresh plugin for every model and rank.
func init() {
	if err := precision.Register("example-f64-layernorm", func() precision.Plugin { return f64Norm{} }); err != nil {
		panic(err)
	}
}

// Register (called in init above) makes a plugin of one's own a spec
// name, usable wherever a spec string is. Compute is an exclusive role,
// so it meets bf16-mixed's autocast through a rule, not through "+". A
// name that is taken is refused.
func ExampleRegister() {
	_, _, err := precision.ParsePolicy("bf16-mixed+example-f64-layernorm", nil, "auto", precision.Options{})
	fmt.Println(err)

	pol, scaling, err := precision.ParsePolicy("bf16-mixed", []string{"kind:LayerNorm=example-f64-layernorm"}, "auto", precision.Options{})
	if err != nil {
		log.Fatal(err)
	}
	res, err := pol.Resolve(models.NewGPT(nn.NewInit(1), models.ReferenceGPT), scaling)
	if err != nil {
		log.Fatal(err)
	}
	for _, s := range res.Scopes {
		if s.Path == "blocks.0.ln1" || s.Path == "blocks.0.qkv" {
			fmt.Println(s.Path, s.Plugin.Name(), precision.Autocast(s.Plugin).CastInput(autograd.OpLayerNorm, dtype.F32))
		}
	}
	fmt.Println(precision.Register("bf16-mixed", func() precision.Plugin { return f64Norm{} }))
	fmt.Println(precision.Register("example-f64-layernorm", func() precision.Plugin { return f64Norm{} }))
	// Output:
	// precision: role compute (autocast) claimed by bf16-mixed and example-f64-layernorm
	// blocks.0.ln1 example-f64-layernorm float64
	// blocks.0.qkv bf16-mixed float32
	// precision: cannot register "bf16-mixed": a built-in spec has that name
	// precision: cannot register "example-f64-layernorm": it is registered already
}
