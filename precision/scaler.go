package precision

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/weftml/weft/comm"

	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/optim"
)

// Scaler is the loss-scaling protocol the fabric drives each step:
// Scale the loss, optionally Unscale (before clipping), Step, Update.
type Scaler interface {
	// Scale is the factor the loss is multiplied by before backward.
	Scale() float64
	// Unscale divides the gradients by the scale, at most once per step,
	// and notes whether any was inf or NaN.
	Unscale(params []nn.NamedParam) error
	// Step unscales if not done yet and steps opt unless a gradient was
	// non-finite; it reports whether the step was skipped.
	Step(opt optim.Optimizer) (skipped bool, err error)
	// Update adjusts the scale after a step and starts the next one.
	Update()
}

// noScaler is the Scaler of plugins that do not scale the loss.
type noScaler struct{}

func (noScaler) Scale() float64                         { return 1 }
func (noScaler) Unscale([]nn.NamedParam) error          { return nil }
func (noScaler) Step(opt optim.Optimizer) (bool, error) { opt.Step(); return false, nil }
func (noScaler) Update()                                {}

// GradScaler is PyTorch's dynamic loss scaler (torch.amp.GradScaler): the
// scale is a float32, halved on a non-finite gradient (the step is then
// skipped) and doubled after GrowthInterval finite steps in a row.
type GradScaler struct {
	GrowthFactor   float64 // 2
	BackoffFactor  float64 // 0.5
	GrowthInterval int     // 2000

	scale         float32
	growthTracker int
	unscaled      bool // Unscale ran since the last Update
	foundInf      bool
	ranks         comm.Agreement // nil on one device
}

// AgreeOver makes Unscale combine its inf/NaN finding with other ranks',
// so that all ranks skip a step together.
func (s *GradScaler) AgreeOver(r comm.Agreement) { s.ranks = r }

// NewGradScaler returns a scaler with PyTorch's defaults: scale 65536,
// growth 2, backoff 0.5, interval 2000.
func NewGradScaler() *GradScaler {
	return &GradScaler{scale: 65536, GrowthFactor: 2, BackoffFactor: 0.5, GrowthInterval: 2000}
}

// SetScale sets the current scale (the init_scale before training).
func (s *GradScaler) SetScale(v float64) { s.scale = float32(v) }

func (s *GradScaler) Name() string   { return "grad-scaler" }
func (s *GradScaler) Scaler() Scaler { return s }
func (s *GradScaler) Scale() float64 { return float64(s.scale) }

// ErrUnscaledTwice is returned when Unscale runs twice in one step.
var ErrUnscaledTwice = errors.New("precision: gradients were already unscaled in this step")

func (s *GradScaler) Unscale(params []nn.NamedParam) error {
	if s.unscaled {
		return ErrUnscaledTwice
	}
	s.unscaled = true
	inv := float64(float32(1 / float64(s.scale))) // PyTorch: scale.double().reciprocal().float()
	for _, p := range params {
		if g := p.Var.Grad; g != nil {
			if g.HasNonFinite() {
				s.foundInf = true
			}
			g.ScaleInPlace(inv)
		}
	}
	if s.ranks != nil {
		found, err := s.ranks.Any(s.foundInf)
		if err != nil {
			return err
		}
		s.foundInf = found
	}
	return nil
}

func (s *GradScaler) Step(opt optim.Optimizer) (bool, error) {
	if !s.unscaled {
		if err := s.Unscale(opt.Params()); err != nil {
			return false, err
		}
	}
	if s.foundInf {
		return true, nil
	}
	opt.Step()
	return false, nil
}

func (s *GradScaler) Update() {
	if s.foundInf {
		s.scale = float32(float64(s.scale) * s.BackoffFactor)
		s.growthTracker = 0
	} else if s.growthTracker++; s.growthTracker >= s.GrowthInterval { // above it: a tracker restored under a longer interval
		if grown := float32(float64(s.scale) * s.GrowthFactor); !math.IsInf(float64(grown), 0) {
			s.scale = grown
		}
		s.growthTracker = 0
	}
	s.unscaled, s.foundInf = false, false
}

// scalerState mirrors GradScaler.state_dict().
type scalerState struct {
	Scale          float64 `json:"scale"`
	GrowthFactor   float64 `json:"growth_factor"`
	BackoffFactor  float64 `json:"backoff_factor"`
	GrowthInterval int     `json:"growth_interval"`
	GrowthTracker  int     `json:"_growth_tracker"`
}

func (s *GradScaler) MarshalState() ([]byte, error) {
	return json.Marshal(scalerState{float64(s.scale), s.GrowthFactor, s.BackoffFactor, s.GrowthInterval, s.growthTracker})
}

// UnmarshalState restores the scale and the growth tracker. The growth
// factor, backoff factor and interval stay s's own, those of the spec
// that built it (16-mixed(growth_interval=100)), which a resume announces
// when it changed: the state's are checked, not taken, unlike
// GradScaler.load_state_dict's.
func (s *GradScaler) UnmarshalState(b []byte) error {
	var st scalerState
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("precision: grad scaler state: %w", err)
	}
	scale := float32(st.Scale)
	if !(scale > 0) || math.IsInf(float64(scale), 0) || !(st.GrowthFactor > 1) || !(st.BackoffFactor > 0 && st.BackoffFactor < 1) ||
		st.GrowthInterval < 1 || st.GrowthTracker < 0 {
		return fmt.Errorf("precision: grad scaler state %+v: want a finite float32 scale > 0, growth > 1, backoff in (0,1), interval ≥ 1, tracker ≥ 0", st)
	}
	s.scale, s.growthTracker = scale, st.GrowthTracker
	s.unscaled, s.foundInf = false, false
	return nil
}
