package precision_test

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/optim"
	"github.com/weftml/weft/precision"
	"github.com/weftml/weft/tensor"
)

// scalerTrace is one trace of scaler.json: torch.amp.GradScaler stepped
// over a scripted pattern of finite, inf and NaN gradients.
type scalerTrace struct {
	InitScale      float64 `json:"init_scale"`
	GrowthFactor   float64 `json:"growth_factor"`
	BackoffFactor  float64 `json:"backoff_factor"`
	GrowthInterval int     `json:"growth_interval"`
	Optimizer      string  `json:"optimizer"` // "SGD lr=0.5 on p=ones(4), loss=sum(p*[1,2,3,4])"
	Trace          []struct {
		Step        int         `json:"step"`
		Kind        string      `json:"kind"` // o: finite, i: grad[1]=inf, n: grad[2]=nan
		ScaleBefore float64     `json:"scale_before"`
		Grad        []jsonFloat `json:"grad_after_unscale"`
		ScaleAfter  float64     `json:"scale_after"`
		Param       []jsonFloat `json:"param_after"`
	} `json:"trace"`
}

// jsonFloat reads a number or one of the strings "inf", "-inf", "nan".
type jsonFloat float64

func (f *jsonFloat) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		v, err := strconv.ParseFloat(s, 64)
		*f = jsonFloat(v)
		return err
	}
	var v float64
	err := json.Unmarshal(b, &v)
	*f = jsonFloat(v)
	return err
}

var (
	lrRe     = regexp.MustCompile(`lr=([0-9.eE+-]+)`)
	onesRe   = regexp.MustCompile(`p=ones\((\d+)\)`)
	coeffsRe = regexp.MustCompile(`\[([^\]]*)\]`)
)

// TestParityGradScaler replays every trace of scaler.json: the scale before
// and after each update, the unscaled gradients, and the parameters after
// each (possibly skipped) SGD step.
func TestParityGradScaler(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(models.ReferenceDir("../"+models.DefaultReferenceDir), "scaler.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref struct{ Traces []scalerTrace }
	if err := json.Unmarshal(b, &ref); err != nil {
		t.Fatal(err)
	}
	if len(ref.Traces) == 0 {
		t.Fatal("scaler.json has no traces")
	}
	for i, tr := range ref.Traces {
		t.Run(strconv.Itoa(i), func(t *testing.T) { replayScaler(t, tr) })
	}
}

func replayScaler(t *testing.T, tr scalerTrace) {
	lr, n, coeffs := parseScalerSetup(t, tr.Optimizer)
	s := precision.NewGradScaler()
	s.SetScale(tr.InitScale)
	s.GrowthFactor, s.BackoffFactor, s.GrowthInterval = tr.GrowthFactor, tr.BackoffFactor, tr.GrowthInterval

	ones := tensor.New(coeffs.DType(), 1, n)
	ones.Fill(1)
	p := autograd.Param(ones)
	opt := optim.NewSGD([]nn.NamedParam{{Path: "p", Var: p}}, lr)
	var tp autograd.Tape
	for _, st := range tr.Trace {
		if got := s.Scale(); got != st.ScaleBefore {
			t.Fatalf("step %d: scale before %v, reference %v", st.Step, got, st.ScaleBefore)
		}
		loss := tp.Linear(autograd.Const(coeffs), p, nil) // sum(p·c) as a [1,1] product
		if err := tp.BackwardScaled(loss, s.Scale()); err != nil {
			t.Fatal(err)
		}
		g := p.Grad.Float32s()
		switch st.Kind {
		case "i":
			g[1] = float32(math.Inf(1))
		case "n":
			g[2] = float32(math.NaN())
		}
		p.Grad = tensor.FromFloat32(g, 1, n)
		if _, err := s.Step(opt); err != nil {
			t.Fatal(err)
		}
		expectFloats(t, st.Step, "unscaled gradient", p.Grad.Float64s(), st.Grad)
		expectFloats(t, st.Step, "parameter", p.Value.Float64s(), st.Param)
		s.Update()
		opt.ZeroGrad()
		if got := s.Scale(); got != st.ScaleAfter {
			t.Fatalf("step %d: scale after %v, reference %v", st.Step, got, st.ScaleAfter)
		}
	}
}

// parseScalerSetup reads the learning rate, parameter size and loss
// coefficients from the trace's description of its optimizer and loss.
func parseScalerSetup(t *testing.T, desc string) (lr float64, n int, coeffs *tensor.Tensor) {
	lrm, onesm, cm := lrRe.FindStringSubmatch(desc), onesRe.FindStringSubmatch(desc), coeffsRe.FindStringSubmatch(desc)
	if lrm == nil || onesm == nil || cm == nil {
		t.Fatalf("cannot read the setup %q", desc)
	}
	lr, _ = strconv.ParseFloat(lrm[1], 64)
	n, _ = strconv.Atoi(onesm[1])
	var c []float32
	for _, f := range strings.Split(cm[1], ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 32)
		if err != nil {
			t.Fatalf("setup %q: %v", desc, err)
		}
		c = append(c, float32(v))
	}
	if len(c) != n {
		t.Fatalf("setup %q: %d coefficients for %d parameters", desc, len(c), n)
	}
	return lr, n, tensor.FromFloat32(c, 1, n)
}

func expectFloats(t *testing.T, step int, what string, got []float64, want []jsonFloat) {
	t.Helper()
	for i, w := range want {
		g, w := got[i], float64(w)
		if g != w && !(math.IsNaN(g) && math.IsNaN(w)) {
			t.Fatalf("step %d: %s %v, reference %v", step, what, got, want)
		}
	}
}
